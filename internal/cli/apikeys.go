package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/apiv1"
)

func init() { register((*app).apiKeysCommand) }

func (a *app) apiKeysCommand() *cobra.Command {
	var conn connFlags
	cmd := &cobra.Command{
		Use:     "api-keys",
		Aliases: []string{"api-key"},
		Short:   "Create, list and revoke the inference API keys of your team",
		Long: "An API key reaches your team's models at /inference/v1 (Authorization: Bearer KEY or\n" +
			"X-API-Key: KEY). Its secret is shown once, when it is created, and only its hash is kept.",
	}
	conn.add(cmd)
	cmd.AddCommand(a.apiKeysCreateCommand(&conn), a.apiKeysListCommand(&conn), a.apiKeysRevokeCommand(&conn))
	return cmd
}

func (a *app) apiKeysCreateCommand(conn *connFlags) *cobra.Command {
	var (
		out   outputFlag
		team  string
		quiet bool
	)
	cmd := &cobra.Command{
		Use:     "create NAME",
		Short:   "Create an API key; its secret is printed this once",
		Example: "  cosmicac api-keys create ci\n  KEY=$(cosmicac api-keys create ci -q)\n  cosmicac api-keys create ci -o json | jq -r .key",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if quiet && cmd.Flags().Changed("output") {
				return usageErrorf("-q prints only the key: give -q or -o, not both")
			}
			c, err := a.connect(conn)
			if err != nil {
				return err
			}
			k, err := c.CreateAPIKey(cmd.Context(), args[0], team)
			if err != nil {
				return c.explain(err)
			}
			if quiet {
				// The key alone, for KEY=$(…): a script has nowhere
				// else to read it, as it is never shown again.
				fmt.Fprintln(a.stdout, k.Key)
				return nil
			}
			if ok, err := out.structured(a.stdout, struct {
				ID   string `json:"id"`
				Name string `json:"name"`
				Key  string `json:"key"`
			}{k.ID, k.Name, k.Key}); ok {
				return err
			}
			fmt.Fprintf(a.stdout, "API key %s (%s) of team %s:\n\n  %s\n\nKeep it now: it is not shown again.\n", k.ID, k.Name, k.Team, k.Key)
			return nil
		},
	}
	out.add(cmd)
	cmd.Flags().StringVar(&team, "team", "", "the team the key belongs to (admins only; default: yours)")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the key, for scripts")
	return cmd
}

func (a *app) apiKeysListCommand(conn *connFlags) *cobra.Command {
	var out outputFlag
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List your team's API keys (never their secrets)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			c, err := a.connect(conn)
			if err != nil {
				return err
			}
			keys, err := c.ListAPIKeys(cmd.Context())
			if err != nil {
				return c.explain(err)
			}
			if keys == nil {
				keys = []apiv1.APIKey{}
			}
			if ok, err := out.structured(a.stdout, apiv1.APIKeyList{Items: keys, Total: len(keys)}); ok {
				return err
			}
			if len(keys) == 0 {
				fmt.Fprintln(a.stderr, "no API keys: create one with `cosmicac api-keys create NAME`")
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tTEAM\tKEY\tCREATED BY\tAGE")
			for _, k := range keys {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s…\t%s\t%s\n", k.ID, k.Name, k.Team, k.Prefix, dash(k.CreatedBy), age(k.CreatedAt))
			}
			return tw.Flush()
		},
	}
	out.add(cmd)
	return cmd
}

func (a *app) apiKeysRevokeCommand(conn *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "revoke NAME|ID",
		Aliases: []string{"delete", "rm"},
		Short:   "Revoke an API key by its name or ID (requests with it fail within seconds)",
		Long: "Revoke an API key of your team, named by its ID or its name. Names need not be unique: a\n" +
			"name that several keys share is refused (exit 2) with their IDs, to revoke one by ID.",
		Example: "  cosmicac api-keys revoke ci\n  cosmicac api-keys revoke key_5d1c0a9e3b7f2468",
		Args:    cobra.ExactArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			c, err := a.connect(conn)
			if err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
			keys, err := c.ListAPIKeys(cmd.Context())
			if err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
			var ids []cobra.Completion
			for _, k := range keys {
				ids = append(ids, cobra.CompletionWithDesc(k.ID, k.Name))
			}
			return ids, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(conn)
			if err != nil {
				return err
			}
			keys, err := c.ListAPIKeys(cmd.Context())
			if err != nil {
				return c.explain(err)
			}
			k, err := resolveAPIKey(keys, args[0])
			if err != nil {
				return err
			}
			if err := c.RevokeAPIKey(cmd.Context(), k.ID); err != nil {
				return c.explain(err)
			}
			if k.Name != "" && k.Name != k.ID {
				fmt.Fprintf(a.stdout, "API key %s (%s) revoked\n", k.ID, k.Name)
			} else {
				fmt.Fprintf(a.stdout, "API key %s revoked\n", k.ID)
			}
			return nil
		},
	}
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
	return apiv1.APIKey{}, usageErrorf("%d API keys are named %q; revoke one by its ID:\n%s", len(named), arg, strings.TrimRight(b.String(), "\n"))
}
