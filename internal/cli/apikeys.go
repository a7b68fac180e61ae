package cli

import (
	"fmt"
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
		out  outputFlag
		team string
	)
	cmd := &cobra.Command{
		Use:     "create NAME",
		Short:   "Create an API key; its secret is printed this once",
		Example: "  cosmicac api-keys create ci\n  cosmicac api-keys create ci -o json | jq -r .key",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			c, err := a.connect(conn)
			if err != nil {
				return err
			}
			k, err := c.CreateAPIKey(cmd.Context(), args[0], team)
			if err != nil {
				return c.explain(err)
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
		Use:     "revoke ID",
		Aliases: []string{"delete", "rm"},
		Short:   "Revoke an API key (requests with it fail within seconds)",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(conn)
			if err != nil {
				return err
			}
			if err := c.RevokeAPIKey(cmd.Context(), args[0]); err != nil {
				return c.explain(err)
			}
			fmt.Fprintf(a.stdout, "API key %s revoked\n", args[0])
			return nil
		},
	}
}
