package components

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store/database"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
)

func init() {
	register((*app).backupCommand)
	register((*app).storeCommand)
}

func (a *app) backupCommand() *cobra.Command {
	var db, out string
	cmd := &cobra.Command{
		Use:   "backup --database FILE --out FILE",
		Short: "Copy a SQLite database, while the platform runs on it, to a new file",
		Long: "Copies the SQLite database --database (cosmicac up's DATA_DIR/cosmicac.db, or a component's)\n" +
			"to --out, a file that must not exist, as one consistent snapshot (SQLite's VACUUM INTO):\n" +
			"the platform may go on writing meanwhile. The copy is private (mode 0600) and checked before\n" +
			"the command ends. To restore, stop the platform and put the copy in the database's place.\n" +
			"A PostgreSQL database is backed up with pg_dump (docs/store.md).",
		Example: "  cosmicac backup --database ~/.local/share/cosmicac/cosmicac.db --out cosmicac-$(date +%F).db",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if db == "" || out == "" {
				return cli.UsageErrorf("give --database FILE and --out FILE")
			}
			if database.IsPostgres(db) {
				return cli.UsageErrorf("--database %s: back up a PostgreSQL database with pg_dump -Fc (docs/store.md)", "postgres://…")
			}
			if err := sqlite.Backup(cmd.Context(), db, out); err != nil {
				if errors.Is(err, cosmic.ErrInvalid) {
					return cli.WithExit(cli.ExitUsage, err)
				}
				return err
			}
			fmt.Fprintf(a.Stdout, "backup written to %s\n", out)
			return nil
		},
	}
	cmd.Flags().StringVar(&db, "database", "", "the SQLite database `FILE` to back up")
	cmd.Flags().StringVar(&out, "out", "", "the new `FILE` to write")
	return cmd
}

func (a *app) storeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Tools of the database that run without a platform",
	}
	cmd.AddCommand(a.storeCopyCommand())
	return cmd
}

func (a *app) storeCopyCommand() *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "copy --from FILE --to postgres://…",
		Short: "Copy every row of a SQLite database into an empty PostgreSQL database",
		Long: "Copies every table of the SQLite database --from (jobs, reservations, racks, teams, users,\n" +
			"members, tokens, API keys, quotas, the audit log) into the PostgreSQL database --to, in one\n" +
			"transaction, both first brought to this binary's schema version. A target that holds any row\n" +
			"is refused and left as it was. Stop the platform first; then start it with --database on the\n" +
			"PostgreSQL URL (docs/store.md).",
		Example: "  cosmicac store copy --from ~/.local/share/cosmicac/cosmicac.db --to 'postgres://cosmicac@db:5432/cosmicac'",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" || to == "" {
				return cli.UsageErrorf("give --from FILE and --to postgres://…")
			}
			if database.IsPostgres(from) {
				return cli.UsageErrorf("--from: a SQLite file, not a postgres:// URL")
			}
			if !database.IsPostgres(to) {
				return cli.UsageErrorf("--to: a postgres:// URL")
			}
			if err := database.Check(to); err != nil {
				return cli.UsageErrorf("--to: %v", err)
			}
			if err := database.Copy(cmd.Context(), from, to); err != nil {
				if errors.Is(err, cosmic.ErrInvalid) {
					return cli.WithExit(cli.ExitUsage, err)
				}
				return err
			}
			fmt.Fprintf(a.Stdout, "copied %s to PostgreSQL\n", from)
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the SQLite database `FILE`")
	cmd.Flags().StringVar(&to, "to", "", "the PostgreSQL database, a postgres:// `URL`")
	return cmd
}
