package components

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store/database"
)

// The operator's tools that act on the app-node's database from its host,
// with no API and no credential: the way back in when every platform admin
// has lost theirs (docs/security.md, "The last way in").

func init() {
	register((*app).adminCommand)
}

func (a *app) adminCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Operator tools on the host of the app-node's database (no API, no credential)",
	}
	cmd.AddCommand(a.adminTokenCommand())
	return cmd
}

// accountsDatabase is the database the app-node of dataDir keeps its
// accounts in: db when given, else cosmicac up's DATA_DIR/cosmicac.db or
// the app-node's DATA_DIR/app.db, whichever exists (one that exists
// neither way, or both, is a usage error: nothing is created).
func accountsDatabase(dataDir, db string) (string, error) {
	if db != "" {
		if !database.IsPostgres(db) {
			if _, err := os.Stat(db); err != nil {
				return "", cli.UsageErrorf("--database %s: %v", db, err)
			}
		}
		return db, nil
	}
	if dataDir == "" {
		return "", cli.UsageErrorf("give --data-dir DIR (cosmicac up's or the app-node's), or --database FILE|postgres://…")
	}
	var found []string
	for _, name := range []string{"cosmicac.db", "app.db"} {
		p := filepath.Join(dataDir, name)
		if _, err := os.Stat(p); err == nil {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 0:
		return "", cli.UsageErrorf("--data-dir %s holds no cosmicac.db (cosmicac up) nor app.db (app-node): give the data dir the platform runs on, or --database", dataDir)
	case 2:
		return "", cli.UsageErrorf("--data-dir %s holds both cosmicac.db and app.db: say which with --database", dataDir)
	}
	return found[0], nil
}

func (a *app) adminTokenCommand() *cobra.Command {
	var dataDir, db, user, name string
	life := apiv1.DefaultTokenLife
	cmd := &cobra.Command{
		Use:   "token --data-dir DIR [--database FILE|postgres://…] [--user NAME]",
		Short: "Mint a platform admin's access token straight in the database (the way back in)",
		Long: "Stores a new personal access token of a platform admin in the app-node's database and prints\n" +
			"its secret, with no API call and no credential: the way back in when no platform admin has a\n" +
			"password or a token left (the bootstrap admin has no password, and a restart mints no new\n" +
			"token once users exist). It needs only what an operator of the host has: the database, read\n" +
			"from --data-dir (cosmicac up's cosmicac.db or the app-node's app.db) or named with --database.\n" +
			"The platform may run meanwhile. The token is recorded in the audit log (action admin.token,\n" +
			"from host). --user picks the platform admin (default: the bootstrap admin, admin).",
		Example: "  cosmicac admin token --data-dir ~/.local/share/cosmicac > admin.token\n" +
			"  cosmicac admin token --database 'postgres://cosmicac@db:5432/cosmicac' --user alice",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if life < time.Minute || life > apiv1.MaxTokenLife {
				return cli.UsageErrorf("--expires-in %v: want from 1m to %v", life, apiv1.MaxTokenLife)
			}
			if name == "" {
				return cli.UsageErrorf("--name: give the token a name")
			}
			path, err := accountsDatabase(dataDir, db)
			if err != nil {
				return err
			}
			if err := database.Check(path); err != nil {
				return cli.UsageErrorf("--database: %v", err)
			}
			st, err := database.Open(cmd.Context(), path)
			if err != nil {
				return err
			}
			defer st.Close()
			tok, err := appnode.MintAdminToken(cmd.Context(), st, user, name, life, time.Now())
			if errors.Is(err, cosmic.ErrInvalid) {
				return cli.WithExit(cli.ExitUsage, err)
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(a.Stdout, tok.Secret)
			fmt.Fprintf(a.Stderr, "token %s of platform admin %s, until %s; recorded in the audit log (admin.token). "+
				"Use it as COSMICAC_TOKEN, or sign in to the web interface with it.\n",
				tok.ID, tok.User, tok.ExpiresAt.Format(time.RFC3339))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "", "the data `DIR` of cosmicac up or of the app-node")
	f.StringVar(&db, "database", "", "the accounts database: a SQLite `FILE` or postgres://… (instead of --data-dir)")
	f.StringVar(&user, "user", "", "the platform admin `NAME` (default admin, else the first platform admin)")
	f.StringVar(&name, "name", "recovery", "the token's `NAME`")
	f.DurationVar(&life, "expires-in", life, "how long the token lives (1m to 366 days)")
	return cmd
}
