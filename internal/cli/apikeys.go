package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/apiv1"
)

func init() { Register((*App).apiKeysCommand) }

func (a *App) apiKeysCommand() *cobra.Command {
	var conn connFlags
	cmd := &cobra.Command{
		Use:     "api-keys",
		Aliases: []string{"api-key"},
		Short:   "Create, list, rotate and revoke the inference API keys of your team",
		Long: "An API key reaches your team's models at /inference/v1 (Authorization: Bearer KEY or\n" +
			"X-API-Key: KEY). Its secret is shown once, when it is created, and only its hash is kept.",
	}
	conn.add(cmd)
	cmd.AddCommand(a.apiKeysCreateCommand(&conn), a.apiKeysListCommand(&conn), a.apiKeysRotateCommand(&conn), a.apiKeysRevokeCommand(&conn))
	return cmd
}

func (a *App) apiKeysCreateCommand(conn *connFlags) *cobra.Command {
	var (
		out     outputFlag
		quiet   bool
		models  []string
		expires string
		tpm     int64
	)
	cmd := withOutput(&cobra.Command{
		Use:   "create NAME",
		Short: "Create an API key; its secret is printed this once",
		Long: "Create an API key of your team. --model limits it to served model names (repeatable; others\n" +
			"answer 404 model_not_found and /inference/v1/models lists only those); --expires ends it after\n" +
			"a duration (720h) or at a time (RFC 3339); --tpm caps the prompt and completion tokens its\n" +
			"requests spend a minute (429 with Retry-After past it, docs/inference.md \"Token limits\").",
		Example: "  cosmicac api-keys create ci\n  KEY=$(cosmicac api-keys create ci -q)\n  cosmicac api-keys create ci -o json | jq -r .key\n" +
			"  cosmicac api-keys create bot --model qwen --model whisper --expires 720h",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if quiet && cmd.Flags().Changed("output") {
				return UsageErrorf("-q prints only the key: give -q or -o, not both")
			}
			if tpm < 0 {
				return UsageErrorf("--tpm %d: want 0 (no cap) or more tokens a minute", tpm)
			}
			in := apiv1.CreateAPIKey{Name: args[0], Models: models, TokensPerMinute: tpm} // of the active team (--team)
			if expires != "" {
				if t, err := time.Parse(time.RFC3339, expires); err == nil {
					in.ExpiresAt = t
				} else if d, err := time.ParseDuration(expires); err == nil && d > 0 {
					in.ExpiresIn = expires
				} else {
					return UsageErrorf("--expires %s: want a duration such as 720h or a time such as 2027-01-31T00:00:00Z", expires)
				}
			}
			return a.withAPI(conn, func(c *apiConn) error {
				k, err := c.CreateAPIKeyWith(cmd.Context(), in)
				if err != nil {
					return c.explain(err)
				}
				if quiet {
					// The key alone, for KEY=$(…): a script has nowhere
					// else to read it, as it is never shown again.
					fmt.Fprintln(a.Stdout, k.Key)
					return nil
				}
				return a.printResult(&out, struct {
					ID   string `json:"id"`
					Name string `json:"name"`
					Key  string `json:"key"`
				}{k.ID, k.Name, k.Key}, "API key %s (%s) of team %s:\n\n  %s\n\nKeep it now: it is not shown again.\n", k.ID, k.Name, k.Team, k.Key)
			})
		},
	}, &out)
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the key, for scripts")
	cmd.Flags().StringArrayVar(&models, "model", nil, "limit the key to this served model name (repeatable; default: every model of the team)")
	cmd.Flags().StringVar(&expires, "expires", "", "end the key after this duration (720h) or at this time (RFC 3339); default: never")
	cmd.Flags().Int64Var(&tpm, "tpm", 0, "cap the key's tokens a minute (prompt and completion, at each proxy-inference); default: no cap")
	return cmd
}

func (a *App) apiKeysListCommand(conn *connFlags) *cobra.Command {
	var out outputFlag
	return withOutput(&cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List your team's API keys (never their secrets)",
		Args:    cobra.NoArgs,
		RunE: a.api(conn, func(cmd *cobra.Command, _ []string, c *apiConn) error {
			keys, err := c.ListAPIKeys(cmd.Context())
			if err != nil {
				return c.explain(err)
			}
			if keys == nil {
				keys = []apiv1.APIKey{}
			}
			if ok, err := out.structured(a.Stdout, apiv1.APIKeyList{Items: keys, Total: len(keys)}); ok {
				return err
			}
			if len(keys) == 0 {
				fmt.Fprintln(a.Stderr, "no API keys: create one with `cosmicac api-keys create NAME`")
				return nil
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tTEAM\tKEY\tMODELS\tTPM\tEXPIRES\tOLD KEY UNTIL\tLAST USED\tCREATED BY\tAGE")
			for _, k := range keys {
				models := "all"
				if len(k.Models) > 0 {
					models = strings.Join(k.Models, ",")
				}
				tpm := "-"
				if k.TokensPerMinute > 0 {
					tpm = strconv.FormatInt(k.TokensPerMinute, 10)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s…\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Team, k.Prefix, models, tpm,
					until(k.ExpiresAt, "never"), until(k.PreviousExpiresAt, "-"), age(k.LastUsedAt), dash(k.CreatedBy), age(k.CreatedAt))
			}
			return tw.Flush()
		}),
	}, &out)
}

// until says how far t is ahead ("in 29d"), "expired" once it has passed,
// or none for a zero t.
func until(t time.Time, none string) string {
	if t.IsZero() {
		return none
	}
	now := timeNow()
	if !now.Before(t) {
		return "expired"
	}
	return "in " + age(now.Add(-t.Sub(now)))
}

func (a *App) apiKeysRotateCommand(conn *connFlags) *cobra.Command {
	var (
		out   outputFlag
		grace string
		quiet bool
	)
	cmd := withOutput(&cobra.Command{
		Use:   "rotate NAME|ID",
		Short: "Give an API key a new secret (printed this once); the old one works for a grace period",
		Long: "Rotate an API key of your team, named by its ID or its name: it gets a new secret, printed\n" +
			"this once, and keeps its ID, name, models and expiry. The old secret keeps working for --grace\n" +
			"(default 24h, at most 168h; 0s ends it at once), so clients can move to the new one without\n" +
			"downtime; a secret replaced by an earlier rotation stops at once.",
		Example: "  cosmicac api-keys rotate ci\n  KEY=$(cosmicac api-keys rotate ci --grace 1h -q)",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if quiet && cmd.Flags().Changed("output") {
				return UsageErrorf("-q prints only the key: give -q or -o, not both")
			}
			if grace != "" {
				if _, err := time.ParseDuration(grace); err != nil {
					return UsageErrorf("--grace %s: want a duration such as 1h or 0s", grace)
				}
			}
			return a.withAPI(conn, func(c *apiConn) error {
				k, err := c.findAPIKey(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				r, err := c.RotateAPIKey(cmd.Context(), k.ID, grace)
				if err != nil {
					return c.explain(err)
				}
				if quiet {
					fmt.Fprintln(a.Stdout, r.Key)
					return nil
				}
				old := "the old secret stopped working now"
				if !r.PreviousExpiresAt.IsZero() {
					old = "the old secret works until " + r.PreviousExpiresAt.Local().Format(time.RFC3339)
				}
				return a.printResult(&out, struct {
					ID                string    `json:"id"`
					Name              string    `json:"name"`
					Key               string    `json:"key"`
					PreviousExpiresAt time.Time `json:"previousExpiresAt,omitzero"`
				}{r.ID, r.Name, r.Key, r.PreviousExpiresAt}, "API key %s (%s) rotated; %s. New secret:\n\n  %s\n\nKeep it now: it is not shown again.\n", r.ID, r.Name, old, r.Key)
			})
		},
	}, &out)
	cmd.Flags().StringVar(&grace, "grace", "", "how long the old secret keeps working (default 24h, at most 168h; 0s: not at all)")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the new key, for scripts")
	return cmd
}

func (a *App) apiKeysRevokeCommand(conn *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "revoke NAME|ID",
		Aliases: []string{"delete", "rm"},
		Short:   "Revoke an API key by its name or ID (requests with it fail within a second)",
		Long: "Revoke an API key of your team, named by its ID or its name. Names need not be unique: a\n" +
			"name that several keys share is refused (exit 2) with their IDs, to revoke one by ID.",
		Example: "  cosmicac api-keys revoke ci\n  cosmicac api-keys revoke key_5d1c0a9e3b7f2468",
		Args:    cobra.ExactArgs(1),
		ValidArgsFunction: a.completeArg(conn, func(ctx context.Context, c *apiConn, _ string) ([]cobra.Completion, error) {
			keys, err := c.ListAPIKeys(ctx)
			if err != nil {
				return nil, err
			}
			var ids []cobra.Completion
			for _, k := range keys {
				ids = append(ids, cobra.CompletionWithDesc(k.ID, k.Name))
			}
			return ids, nil
		}),
		RunE: a.api(conn, func(cmd *cobra.Command, args []string, c *apiConn) error {
			k, err := c.findAPIKey(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if err := c.RevokeAPIKey(cmd.Context(), k.ID); err != nil {
				return c.explain(err)
			}
			if k.Name != "" && k.Name != k.ID {
				fmt.Fprintf(a.Stdout, "API key %s (%s) revoked\n", k.ID, k.Name)
			} else {
				fmt.Fprintf(a.Stdout, "API key %s revoked\n", k.ID)
			}
			return nil
		}),
	}
}

// findAPIKey lists the caller's API keys and picks the one arg names, as
// resolveAPIKey does.
func (c *apiConn) findAPIKey(ctx context.Context, arg string) (apiv1.APIKey, error) {
	keys, err := c.ListAPIKeys(ctx)
	if err != nil {
		return apiv1.APIKey{}, c.explain(err)
	}
	return resolveAPIKey(keys, arg)
}

// resolveAPIKey finds the key that arg names among the caller's keys: the
// key with that ID, else the one key with that name. A name that several
// keys share is a usage error listing them, as revoking any one of them
// would be a guess. An arg that is neither is taken as an ID, since an
// admin may revoke another team's key, which the list does not show; the
// API answers not_found if there is none.
func resolveAPIKey(keys []apiv1.APIKey, arg string) (apiv1.APIKey, error) {
	var named []apiv1.APIKey
	for _, k := range keys {
		if k.ID == arg {
			return k, nil
		}
		if k.Name == arg {
			named = append(named, k)
		}
	}
	switch len(named) {
	case 0:
		return apiv1.APIKey{ID: arg}, nil
	case 1:
		return named[0], nil
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tNAME\tKEY\tCREATED BY\tAGE")
	for _, k := range named {
		fmt.Fprintf(tw, "  %s\t%s\t%s…\t%s\t%s\n", k.ID, k.Name, k.Prefix, dash(k.CreatedBy), age(k.CreatedAt))
	}
	_ = tw.Flush()
	return apiv1.APIKey{}, UsageErrorf("%d API keys are named %q; revoke one by its ID:\n%s", len(named), arg, strings.TrimRight(b.String(), "\n"))
}
