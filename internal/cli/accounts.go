package cli

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// The people side's commands: users, teams and their members, personal
// access tokens, and the audit log (docs/permissions.md says who may run
// which).

func init() {
	Register((*App).usersCommand)
	Register((*App).teamsCommand)
	Register((*App).tokensCommand)
	Register((*App).auditCommand)
}

// changed is what a command that changes something prints with -o json
// or yaml, when the API answers no object.
type changed struct {
	Action string `json:"action"` // deleted, revoked, removed, set
	Kind   string `json:"kind"`   // user, team, token, member, password, quota
	Name   string `json:"name"`
	Team   string `json:"team,omitempty"`
}

// withOutput gives cmd the -o flag (out), checked before it runs.
func withOutput(cmd *cobra.Command, out *outputFlag) *cobra.Command {
	out.add(cmd)
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if err := out.check(); err != nil {
			return err
		}
		return run(c, args)
	}
	return cmd
}

// printResult prints v with -o json|yaml, else the line.
func (a *App) printResult(out *outputFlag, v any, format string, args ...any) error {
	if ok, err := out.structured(a.Stdout, v); ok {
		return err
	}
	fmt.Fprintf(a.Stdout, format, args...)
	return nil
}

// deleteCommand is the `delete NAME` of users and teams: del deletes the
// one of that kind named NAME, and the verb says so (with -o json|yaml, as
// changed).
func (a *App) deleteCommand(conn *connFlags, kind, short string, del func(c *apiConn, ctx context.Context, name string) error) *cobra.Command {
	var out outputFlag
	return withOutput(&cobra.Command{
		Use: "delete NAME", Aliases: []string{"rm"}, Args: cobra.ExactArgs(1),
		Short: short,
		RunE: a.api(conn, func(cmd *cobra.Command, args []string, c *apiConn) error {
			if err := del(c, cmd.Context(), args[0]); err != nil {
				return c.explain(err)
			}
			return a.printResult(&out, changed{Action: "deleted", Kind: kind, Name: args[0]}, "%s %s deleted\n", kind, args[0])
		}),
	}, &out)
}

// ---- users

func (a *App) usersCommand() *cobra.Command {
	var conn connFlags
	cmd := &cobra.Command{
		Use:     "users",
		Aliases: []string{"user"},
		Short:   "Create, list and delete users, and set passwords (platform admins; passwd: anyone)",
	}
	conn.add(cmd)
	cmd.AddCommand(a.usersListCommand(&conn), a.usersCreateCommand(&conn), a.usersGetCommand(&conn),
		a.usersDeleteCommand(&conn), a.usersPasswdCommand(&conn), a.usersAdminCommand(&conn))
	return cmd
}

func userTeams(ms []cosmic.Member) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.Team + ":" + string(m.Role)
	}
	return dash(strings.Join(parts, ","))
}

func (a *App) printUsers(out *outputFlag, users []apiv1.UserInfo) error {
	if ok, err := out.structured(a.Stdout, apiv1.UserList{Items: users, Total: len(users)}); ok {
		return err
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPLATFORM ADMIN\tPASSWORD\tTEAMS\tAGE")
	for _, u := range users {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", u.Name, yesNo(u.PlatformAdmin), yesNo(u.HasPassword), userTeams(u.Teams), age(u.CreatedAt))
	}
	return tw.Flush()
}

func (a *App) usersListCommand(conn *connFlags) *cobra.Command {
	var out outputFlag
	return withOutput(&cobra.Command{
		Use: "list", Aliases: []string{"ls"}, Short: "List users and their teams", Args: cobra.NoArgs,
		RunE: a.api(conn, func(cmd *cobra.Command, _ []string, c *apiConn) error {
			users, err := c.ListUsers(cmd.Context())
			if err != nil {
				return c.explain(err)
			}
			return a.printUsers(&out, users)
		}),
	}, &out)
}

func (a *App) usersCreateCommand(conn *connFlags) *cobra.Command {
	var (
		out                         outputFlag
		password, passwordStdin, pa bool
	)
	cmd := withOutput(&cobra.Command{
		Use:   "create NAME [--password | --password-stdin] [--platform-admin]",
		Short: "Create a user (add them to teams with `cosmicac teams members add`)",
		Long: "Create a user. With --password the password is asked for (twice, on a terminal); with\n" +
			"--password-stdin it is the first line of stdin. Without either the user signs in with tokens\n" +
			"only, until `cosmicac users passwd NAME` gives them a password.",
		Example: "  cosmicac users create alice --password\n  cosmicac teams members add alice --team ml --role member",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in := apiv1.CreateUser{Name: args[0], PlatformAdmin: pa}
			if password || passwordStdin {
				pw, err := a.newPassword("Password for "+args[0]+": ", passwordStdin)
				if err != nil {
					return err
				}
				in.Password = pw
			}
			return a.withAPI(conn, func(c *apiConn) error {
				u, err := c.CreateUser(cmd.Context(), in)
				if err != nil {
					return c.explain(err)
				}
				return a.printResult(&out, u, "user %s created\n", u.Name)
			})
		},
	}, &out)
	cmd.Flags().BoolVar(&password, "password", false, "ask for a password")
	cmd.Flags().BoolVar(&passwordStdin, "password-stdin", false, "read the password from the first line of stdin")
	cmd.Flags().BoolVar(&pa, "platform-admin", false, "make the user a platform admin")
	return cmd
}

// newPassword reads a new password: twice on a terminal, once from stdin.
func (a *App) newPassword(prompt string, fromStdin bool) (string, error) {
	pw, err := a.readPassword(prompt, fromStdin)
	if err != nil || fromStdin || !a.stdinTerminal() {
		return pw, err
	}
	again, err := a.readPassword("Again: ", false)
	if err != nil {
		return "", err
	}
	if again != pw {
		return "", UsageErrorf("the passwords differ")
	}
	return pw, nil
}

func (a *App) usersGetCommand(conn *connFlags) *cobra.Command {
	var out outputFlag
	return withOutput(&cobra.Command{
		Use: "get NAME", Short: "Show a user and their teams", Args: cobra.ExactArgs(1),
		RunE: a.api(conn, func(cmd *cobra.Command, args []string, c *apiConn) error {
			u, err := c.GetUser(cmd.Context(), args[0])
			if err != nil {
				return c.explain(err)
			}
			if ok, err := out.structured(a.Stdout, u); ok {
				return err
			}
			return a.printUsers(&out, []apiv1.UserInfo{u})
		}),
	}, &out)
}

func (a *App) usersDeleteCommand(conn *connFlags) *cobra.Command {
	return a.deleteCommand(conn, "user", "Delete a user with their memberships, tokens and sessions (their jobs stay)", (*apiConn).DeleteUser)
}

func (a *App) usersPasswdCommand(conn *connFlags) *cobra.Command {
	var (
		passwordStdin bool
		out           outputFlag
	)
	cmd := withOutput(&cobra.Command{
		Use:   "passwd [NAME]",
		Short: "Change your password, or set NAME's (platform admins)",
		Long: "Without NAME, change your own password: the current one is asked for first (when you\n" +
			"have one). With NAME, a platform admin sets that user's password. Either ends the user's\n" +
			"browser sessions; their tokens stay. With --password-stdin, stdin's first line is the\n" +
			"current password (yours only) and the next the new one.",
		Args: cobra.MaximumNArgs(1),
		RunE: a.api(conn, func(cmd *cobra.Command, args []string, c *apiConn) error {
			if len(args) == 1 {
				pw, err := a.newPassword("New password for "+args[0]+": ", passwordStdin)
				if err != nil {
					return err
				}
				if err := c.SetPassword(cmd.Context(), args[0], pw); err != nil {
					return c.explain(err)
				}
				return a.printResult(&out, changed{Action: "set", Kind: "password", Name: args[0]}, "password of %s set\n", args[0])
			}
			who, err := c.WhoAmI(cmd.Context())
			if err != nil {
				return c.explain(err)
			}
			var cur string
			if fromStdin := passwordStdin || !a.stdinTerminal(); fromStdin {
				lines, err := a.stdinLines(2)
				if err != nil {
					return err
				}
				cur, lines = lines[0], lines[1:]
				if err := c.ChangePassword(cmd.Context(), cur, lines[0]); err != nil {
					return c.explain(err)
				}
			} else {
				if cur, err = a.readPassword("Current password: ", false); err != nil {
					return err
				}
				pw, err := a.newPassword("New password: ", false)
				if err != nil {
					return err
				}
				if err := c.ChangePassword(cmd.Context(), cur, pw); err != nil {
					return c.explain(err)
				}
			}
			return a.printResult(&out, changed{Action: "set", Kind: "password", Name: who.User}, "password of %s changed\n", who.User)
		}),
	}, &out)
	cmd.Flags().BoolVar(&passwordStdin, "password-stdin", false, "read the password(s) from stdin, one a line")
	return cmd
}

func (a *App) usersAdminCommand(conn *connFlags) *cobra.Command {
	var out outputFlag
	return withOutput(&cobra.Command{
		Use: "platform-admin NAME on|off", Args: cobra.ExactArgs(2),
		Short: "Make a user a platform admin, or not (the last one stays)",
		RunE: func(cmd *cobra.Command, args []string) error {
			var on bool
			switch args[1] {
			case "on", "true", "yes":
				on = true
			case "off", "false", "no":
			default:
				return UsageErrorf("want on or off, not %q", args[1])
			}
			return a.withAPI(conn, func(c *apiConn) error {
				u, err := c.UpdateUser(cmd.Context(), args[0], apiv1.UpdateUser{PlatformAdmin: &on})
				if err != nil {
					return c.explain(err)
				}
				return a.printResult(&out, u, "%s is %sa platform admin\n", args[0], map[bool]string{true: "", false: "not "}[on])
			})
		},
	}, &out)
}

// ---- teams

func (a *App) teamsCommand() *cobra.Command {
	var conn connFlags
	cmd := &cobra.Command{
		Use:     "teams",
		Aliases: []string{"team"},
		Short:   "List, create, delete and choose teams, and manage their members",
	}
	conn.add(cmd)
	cmd.AddCommand(a.teamsListCommand(&conn), a.teamsCreateCommand(&conn), a.teamsDeleteCommand(&conn),
		a.teamsUseCommand(&conn), a.membersCommand(&conn))
	return cmd
}

func (a *App) teamsListCommand(conn *connFlags) *cobra.Command {
	var out outputFlag
	return withOutput(&cobra.Command{
		Use: "list", Aliases: []string{"ls"}, Args: cobra.NoArgs,
		Short: "List your teams and your role in each (platform admins: every team); * marks the active one",
		RunE: a.api(conn, func(cmd *cobra.Command, _ []string, c *apiConn) error {
			teams, err := c.ListTeams(cmd.Context())
			if err != nil {
				return c.explain(err)
			}
			if ok, err := out.structured(a.Stdout, apiv1.TeamList{Items: teams, Total: len(teams)}); ok {
				return err
			}
			who, err := c.WhoAmI(cmd.Context())
			if err != nil {
				return c.explain(err)
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "\tNAME\tROLE\tAGE")
			for _, t := range teams {
				mark := ""
				if t.Name == who.Team {
					mark = "*"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", mark, t.Name, dash(string(t.Role)), age(t.CreatedAt))
			}
			return tw.Flush()
		}),
	}, &out)
}

func (a *App) teamsCreateCommand(conn *connFlags) *cobra.Command {
	var (
		out   outputFlag
		owner string
	)
	cmd := withOutput(&cobra.Command{
		Use: "create NAME [--owner USER]", Args: cobra.ExactArgs(1),
		Short:   "Create a team (platform admins), with USER as its first owner",
		Example: "  cosmicac teams create ml --owner alice",
		RunE: a.api(conn, func(cmd *cobra.Command, args []string, c *apiConn) error {
			t, err := c.CreateTeam(cmd.Context(), apiv1.CreateTeam{Name: args[0], Owner: owner})
			if err != nil {
				return c.explain(err)
			}
			return a.printResult(&out, t, "team %s created\n", t.Name)
		}),
	}, &out)
	cmd.Flags().StringVar(&owner, "owner", "", "the team's first owner")
	return cmd
}

func (a *App) teamsDeleteCommand(conn *connFlags) *cobra.Command {
	return a.deleteCommand(conn, "team", "Delete a team that has no jobs left (owners, platform admins)", (*apiConn).DeleteTeam)
}

func (a *App) teamsUseCommand(conn *connFlags) *cobra.Command {
	var out outputFlag
	return withOutput(&cobra.Command{
		Use: "use TEAM", Args: cobra.ExactArgs(1),
		Short: "Act in TEAM from now on: save it in the login config (--team and $" + envTeam + " win over it)",
		Long: "Check that you may act in TEAM and save it beside the URL and token `cosmicac login` saved:\n" +
			"the jobs you create belong to it and the lists show it. `cosmicac teams use -` forgets it.",
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := a.configPath()
			if err != nil {
				return err
			}
			saved, err := readConfigFile(path)
			if err != nil {
				return err
			}
			if saved.Token == "" {
				return UsageErrorf("no saved login: run `cosmicac login` first")
			}
			if args[0] == "-" {
				saved.Team = ""
				if err := writeConfigFile(path, saved); err != nil {
					return err
				}
				return a.printResult(&out, changed{Action: "removed", Kind: "saved team", Name: "-"}, "no team saved: you act in your only team, or name one with --team\n")
			}
			return a.withAPI(&connFlags{url: conn.url, token: conn.token, team: args[0]}, func(c *apiConn) error {
				who, err := c.WhoAmI(cmd.Context())
				if err != nil {
					return c.explain(err)
				}
				saved.Team = args[0]
				if err := writeConfigFile(path, saved); err != nil {
					return err
				}
				role := string(who.Role)
				if role == "" {
					role = "platform admin"
				}
				return a.printResult(&out, who, "now acting in team %s (%s)\n", who.Team, role)
			})
		},
	}, &out)
}

func (a *App) membersCommand(conn *connFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "members",
		Aliases: []string{"member"},
		Short:   "List a team's members, add or remove them, or change their role",
		Long: "Roles: owner (everything in the team), admin (members, API keys), member (jobs, shells),\n" +
			"viewer (reads). The team is --team, else the active one. See docs/permissions.md.",
	}
	cmd.AddCommand(a.membersListCommand(conn), a.membersAddCommand(conn, "add"), a.membersAddCommand(conn, "role"), a.membersRemoveCommand(conn))
	return cmd
}

// memberTeam is the team a members command acts in: --team, else the
// active one the API reports.
func (a *App) memberTeam(cmd *cobra.Command, c *apiConn, conn *connFlags) (string, error) {
	if conn.team != "" {
		return conn.team, nil
	}
	who, err := c.WhoAmI(cmd.Context())
	if err != nil {
		return "", c.explain(err)
	}
	if who.Team == "" {
		return "", UsageErrorf("which team? give --team TEAM or run `cosmicac teams use TEAM`")
	}
	return who.Team, nil
}

func (a *App) membersListCommand(conn *connFlags) *cobra.Command {
	var out outputFlag
	return withOutput(&cobra.Command{
		Use: "list", Aliases: []string{"ls"}, Args: cobra.NoArgs, Short: "List the team's members",
		RunE: a.api(conn, func(cmd *cobra.Command, _ []string, c *apiConn) error {
			team, err := a.memberTeam(cmd, c, conn)
			if err != nil {
				return err
			}
			ms, err := c.ListMembers(cmd.Context(), team)
			if err != nil {
				return c.explain(err)
			}
			if ok, err := out.structured(a.Stdout, apiv1.MemberList{Items: ms, Total: len(ms)}); ok {
				return err
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "USER\tROLE")
			for _, m := range ms {
				fmt.Fprintf(tw, "%s\t%s\n", m.User, m.Role)
			}
			return tw.Flush()
		}),
	}, &out)
}

func (a *App) membersAddCommand(conn *connFlags, verb string) *cobra.Command {
	var (
		role string
		out  outputFlag
	)
	cmd := withOutput(&cobra.Command{
		Use: verb + " USER --role owner|admin|member|viewer", Args: cobra.ExactArgs(1),
		Short: map[string]string{"add": "Add USER to the team with a role", "role": "Change USER's role in the team"}[verb],
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cosmic.Role(role).Valid() {
				return UsageErrorf("--role: want owner, admin, member or viewer, not %q", role)
			}
			return a.withAPI(conn, func(c *apiConn) error {
				team, err := a.memberTeam(cmd, c, conn)
				if err != nil {
					return err
				}
				m, err := c.PutMember(cmd.Context(), team, args[0], cosmic.Role(role))
				if err != nil {
					return c.explain(err)
				}
				return a.printResult(&out, m, "%s is %s in team %s\n", m.User, m.Role, m.Team)
			})
		},
	}, &out)
	cmd.Flags().StringVar(&role, "role", "", "owner, admin, member or viewer")
	_ = cmd.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{"owner", "admin", "member", "viewer"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (a *App) membersRemoveCommand(conn *connFlags) *cobra.Command {
	var out outputFlag
	return withOutput(&cobra.Command{
		Use: "remove USER", Aliases: []string{"rm"}, Args: cobra.ExactArgs(1),
		Short: "Remove USER from the team (with their tokens bound to it)",
		RunE: a.api(conn, func(cmd *cobra.Command, args []string, c *apiConn) error {
			team, err := a.memberTeam(cmd, c, conn)
			if err != nil {
				return err
			}
			if err := c.DeleteMember(cmd.Context(), team, args[0]); err != nil {
				return c.explain(err)
			}
			return a.printResult(&out, changed{Action: "removed", Kind: "member", Name: args[0], Team: team}, "%s removed from team %s\n", args[0], team)
		}),
	}, &out)
}

// ---- tokens

func (a *App) tokensCommand() *cobra.Command {
	var conn connFlags
	cmd := &cobra.Command{
		Use:     "tokens",
		Aliases: []string{"token"},
		Short:   "Create, list and revoke your personal access tokens for the CLI and the API",
	}
	conn.add(cmd)
	cmd.AddCommand(a.tokensCreateCommand(&conn), a.tokensListCommand(&conn), a.tokensRevokeCommand(&conn))
	return cmd
}

func (a *App) tokensCreateCommand(conn *connFlags) *cobra.Command {
	var (
		out      outputFlag
		in       apiv1.CreateToken
		selector string
		quiet    bool
	)
	cmd := withOutput(&cobra.Command{
		Use:   "create NAME [--expires 720h] [--bind TEAM [--scope read|operator] [--selector k=v,...]]",
		Short: "Make a personal access token; its secret is printed this once",
		Long: "A token carries your rights, or fewer: --bind ties it to one team, --scope read keeps\n" +
			"only reading and --scope operator reading and operating jobs, --selector confines it to the\n" +
			"jobs with those labels (the jobs it creates get them). It expires after --expires\n" +
			"(default 2160h, at most 8784h).\n\n" +
			"Run with a token bound to a team or limited by a selector, it makes no token stronger than\n" +
			"that one: the new token keeps its team, scope, selector labels and end (what you leave out\n" +
			"is taken from it; asking more is refused).",
		Example: "  cosmicac tokens create laptop\n" +
			"  cosmicac tokens create ci --bind ml --scope operator --selector app=ci --expires 720h -q",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if quiet && cmd.Flags().Changed("output") {
				return UsageErrorf("-q prints only the token: give -q or -o, not both")
			}
			in.Name = args[0]
			if selector != "" {
				in.Selector = map[string]string{}
				for _, term := range strings.Split(selector, ",") {
					k, v, ok := strings.Cut(strings.TrimSpace(term), "=")
					if !ok || k == "" {
						return UsageErrorf("--selector %q: want key=value,...", selector)
					}
					in.Selector[k] = v
				}
			}
			return a.withAPI(conn, func(c *apiConn) error {
				t, err := c.CreateToken(cmd.Context(), in)
				if err != nil {
					return c.explain(err)
				}
				if quiet {
					fmt.Fprintln(a.Stdout, t.Secret)
					return nil
				}
				return a.printResult(&out, t, "token %s (%s), expires %s:\n\n  %s\n\nKeep it now: it is not shown again.\n", t.ID, t.Name, t.ExpiresAt.Format(time.RFC3339), t.Secret)
			})
		},
	}, &out)
	cmd.Flags().StringVar(&in.ExpiresIn, "expires", "", "how long the token lives (a duration, default 2160h)")
	cmd.Flags().StringVar(&in.Team, "bind", "", "bind the token to this team")
	cmd.Flags().StringVar(&in.Scope, "scope", "", "read or operator (with --bind)")
	cmd.Flags().StringVar(&selector, "selector", "", "only jobs with these labels, k=v,... (with --bind)")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the token, for scripts")
	return cmd
}

func (a *App) tokensListCommand(conn *connFlags) *cobra.Command {
	var out outputFlag
	return withOutput(&cobra.Command{
		Use: "list", Aliases: []string{"ls"}, Args: cobra.NoArgs, Short: "List your tokens (never their secrets), with their last use",
		RunE: a.api(conn, func(cmd *cobra.Command, _ []string, c *apiConn) error {
			toks, err := c.ListTokens(cmd.Context())
			if err != nil {
				return c.explain(err)
			}
			if ok, err := out.structured(a.Stdout, apiv1.TokenList{Items: toks, Total: len(toks)}); ok {
				return err
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tTEAM\tSCOPE\tSELECTOR\tLAST USED\tEXPIRES\tAGE")
			for _, t := range toks {
				last, exp := "never", "never"
				if !t.LastUsedAt.IsZero() {
					last = age(t.LastUsedAt) + " ago"
				}
				if !t.ExpiresAt.IsZero() {
					exp = t.ExpiresAt.Format(time.DateOnly)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, dash(t.Team), dash(t.Scope), dash(labelString(t.Selector)), last, exp, age(t.CreatedAt))
			}
			return tw.Flush()
		}),
	}, &out)
}

func labelString(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

func (a *App) tokensRevokeCommand(conn *connFlags) *cobra.Command {
	var out outputFlag
	return withOutput(&cobra.Command{
		Use: "revoke NAME|ID", Aliases: []string{"delete", "rm"}, Args: cobra.ExactArgs(1),
		Short: "Revoke one of your tokens by its name or ID (it stops working at once)",
		RunE: a.api(conn, func(cmd *cobra.Command, args []string, c *apiConn) error {
			toks, err := c.ListTokens(cmd.Context())
			if err != nil {
				return c.explain(err)
			}
			id := args[0]
			var named []string
			for _, t := range toks {
				if t.ID == args[0] {
					named = []string{t.ID}
					break
				}
				if t.Name == args[0] {
					named = append(named, t.ID)
				}
			}
			switch len(named) {
			case 0:
			case 1:
				id = named[0]
			default:
				return UsageErrorf("%d tokens are named %q; revoke one by its ID: %s", len(named), args[0], strings.Join(named, ", "))
			}
			if err := c.RevokeToken(cmd.Context(), id); err != nil {
				return c.explain(err)
			}
			return a.printResult(&out, changed{Action: "revoked", Kind: "token", Name: id}, "token %s revoked\n", id)
		}),
	}, &out)
}

// ---- audit

func (a *App) auditCommand() *cobra.Command {
	var (
		conn         connFlags
		out          outputFlag
		q            client.AuditQuery
		since, until string
		allTeams     bool
	)
	cmd := withOutput(&cobra.Command{
		Use:   "audit [--user U] [--action A] [--since 24h|TIME] [--until TIME] [--limit N]",
		Short: "Read the audit log of the team: who changed what, when, from where (team admins)",
		Long: "Every change through the API and every shell and SSH session, newest first, with who,\n" +
			"which team, what, when, from where and the outcome. --since and --until take an RFC 3339 time\n" +
			"or a duration back from now (24h). Platform admins read every team's with --all-teams.",
		Example: "  cosmicac audit --since 24h\n  cosmicac audit --user alice --action deleteJob -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if q.Since, err = timeFlag("since", since); err != nil {
				return err
			}
			if q.Until, err = timeFlag("until", until); err != nil {
				return err
			}
			if err := conn.allTeams(allTeams); err != nil {
				return err
			}
			return a.withAPI(&conn, func(c *apiConn) error {
				page, err := c.ListAudit(cmd.Context(), q)
				if err != nil {
					return c.explain(err)
				}
				if ok, err := out.structured(a.Stdout, page); ok {
					return err
				}
				tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TIME\tUSER\tTEAM\tACTION\tTARGET\tOUTCOME\tFROM")
				for _, r := range page.Items {
					oc := r.Outcome + " " + strconv.Itoa(r.Status)
					if r.Detail != "" {
						oc += " " + r.Detail
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.At.Local().Format(time.DateTime), dash(r.User), dash(r.Team), r.Action, dash(r.Target), oc, r.Remote)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				if page.Next != 0 {
					fmt.Fprintf(a.Stderr, "more: add --before %d\n", page.Next)
				}
				return nil
			})
		},
	}, &out)
	conn.add(cmd)
	cmd.Flags().StringVar(&q.User, "user", "", "only this user's actions")
	cmd.Flags().StringVar(&q.Action, "action", "", "only this action (e.g. createJob, deleteJob, shell.open)")
	cmd.Flags().StringVar(&since, "since", "", "from this time, or this long ago (24h)")
	cmd.Flags().StringVar(&until, "until", "", "until this time, or this long ago")
	cmd.Flags().Int64Var(&q.Before, "before", 0, "only records older than this ID (the next page)")
	cmd.Flags().IntVar(&q.Limit, "limit", 0, "at most this many records (default 100)")
	cmd.Flags().BoolVar(&allTeams, "all-teams", false, "every team's records (platform admins)")
	return cmd
}

// timeFlag reads an RFC 3339 time or a duration back from now.
func timeFlag(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return time.Now().Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, UsageErrorf("--%s %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration (24h)", name, v)
	}
	return t, nil
}

// allTeams makes the connection name every team (a platform admin's
// --all-teams), which --team may not also name.
func (c *connFlags) allTeams(all bool) error {
	if !all {
		return nil
	}
	if c.team != "" {
		return UsageErrorf("give --team or --all-teams, not both")
	}
	c.team = apiv1.AllTeams
	return nil
}

// stdinTerminal says whether stdin is a terminal.
func (a *App) stdinTerminal() bool {
	f, ok := a.Stdin.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// stdinLines reads n lines of stdin (without their line ends).
func (a *App) stdinLines(n int) ([]string, error) {
	br := bufio.NewReader(a.Stdin)
	out := make([]string, 0, n)
	for range n {
		line, err := br.ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		if line == "" && err != nil {
			return nil, UsageErrorf("want %d lines on stdin (the current password, then the new one)", n)
		}
		out = append(out, line)
	}
	return out, nil
}
