package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
)

func init() { Register((*App).loginCommand) }

func (a *App) loginCommand() *cobra.Command {
	var (
		conn          connFlags
		tokenFile     string
		user          string
		passwordStdin bool
		expires       string
	)
	cmd := &cobra.Command{
		Use:   "login [--url URL] [--user NAME | --token TOKEN | --token-file FILE]",
		Short: "Sign in with a password or a token and save it with the URL for the other commands",
		Long: "With --user, ask for the password (on the terminal, or one line of stdin with\n" +
			"--password-stdin; never on the command line), sign in, and save the personal access token\n" +
			"the API answers (it expires after --expires; `cosmicac tokens list` shows it). Otherwise check\n" +
			"a token (--token, --token-file, or stdin) against the API.\n\n" +
			"The URL and token go to USER_CONFIG_DIR/cosmicac/config.yaml (mode 0600; $" + envConfig + " names\n" +
			"another file). The URL defaults to $" + envURL + ", the saved one, or " + DefaultURL + ".\n" +
			"$" + envURL + " and $" + envToken + " still win over the saved file.",
		Example: "  cosmicac login --user alice\n" +
			"  cosmicac login --token-file ~/.local/share/cosmicac/admin.token\n" +
			"  cosmicac login --url https://cosmicac.example.com --token \"$TOKEN\"",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token := conn.token
			switch {
			case user != "" && (token != "" || tokenFile != ""):
				return UsageErrorf("give --user or a token, not both")
			case passwordStdin && user == "":
				return UsageErrorf("--password-stdin goes with --user")
			case cmd.Flags().Changed("expires") && user == "":
				return UsageErrorf("--expires goes with --user (a token has its own expiry)")
			case token != "" && tokenFile != "":
				return UsageErrorf("give --token or --token-file, not both")
			case user != "":
			case tokenFile != "":
				data, err := os.ReadFile(tokenFile)
				if err != nil {
					return fmt.Errorf("read token: %w", err)
				}
				token = strings.TrimSpace(string(data))
			case token == "":
				fmt.Fprint(a.Stderr, "Token: ")
				line, err := bufio.NewReader(a.Stdin).ReadString('\n')
				if err != nil && line == "" {
					return UsageErrorf("no token: give --user, --token, --token-file or the token on stdin")
				}
				token = strings.TrimSpace(line)
			}
			if user != "" {
				pw, err := a.readPassword("Password for "+user+": ", passwordStdin)
				if err != nil {
					return err
				}
				cfg, err := a.clientConfig(&connFlags{url: conn.url})
				if err != nil {
					return err
				}
				c := &apiConn{Client: client.New(cfg.URL, ""), url: cfg.URL} // no token: signing in

				host, _ := os.Hostname()
				tok, err := c.Login(cmd.Context(), apiv1.Login{User: user, Password: pw, TokenName: "cli login on " + host, ExpiresIn: expires})
				if err != nil {
					return c.explain(err)
				}
				token = tok.Secret
			}
			if token == "" {
				return UsageErrorf("the token is empty")
			}
			c, err := a.connect(&connFlags{url: conn.url, token: token})
			if err != nil {
				return err
			}
			who, err := c.WhoAmI(cmd.Context())
			if err != nil {
				return c.explain(err)
			}
			path, err := a.configPath()
			if err != nil {
				return err
			}
			saved, _ := readConfigFile(path)
			next := clientConfig{URL: c.url, Token: token}
			if saved.URL == c.url && saved.Team != "" && who.BoundTeam == "" {
				next.Team = saved.Team // the same platform: keep the team chosen
			}
			if err := writeConfigFile(path, next); err != nil {
				return err
			}
			fmt.Fprintf(a.Stdout, "Logged in to %s as %s%s.\nSaved to %s.\n", c.url, who.User, describeTeams(who), path)
			if a.Getenv(envToken) != "" || a.Getenv(envURL) != "" {
				fmt.Fprintf(a.Stderr, "note: $%s or $%s is set and wins over the saved config\n", envURL, envToken)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&conn.url, "url", "", "CosmicAC API URL (default $"+envURL+", the saved URL, or "+DefaultURL+")")
	cmd.Flags().StringVar(&conn.token, "token", "", "API token")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "read the API token from FILE (e.g. DATA_DIR/admin.token)")
	cmd.Flags().StringVarP(&user, "user", "u", "", "sign in as NAME with a password (asked for)")
	cmd.Flags().BoolVar(&passwordStdin, "password-stdin", false, "read the password from the first line of stdin")
	cmd.Flags().StringVar(&expires, "expires", "", "how long the saved token lives (default 720h, at most 8784h)")
	return cmd
}

// describeTeams sums up the caller's teams for a message: " (team default,
// role owner)", " (teams a, b; active a)", " (platform admin, no team)".
func describeTeams(w apiv1.WhoAmI) string {
	var parts []string
	if w.PlatformAdmin {
		parts = append(parts, "platform admin")
	}
	switch {
	case w.Team != "" && len(w.Teams) <= 1:
		parts = append(parts, fmt.Sprintf("team %s, role %s", w.Team, w.Role))
	case len(w.Teams) > 1:
		names := make([]string, len(w.Teams))
		for i, m := range w.Teams {
			names[i] = m.Team
		}
		p := "teams " + strings.Join(names, ", ")
		if w.Team != "" {
			p += fmt.Sprintf("; active %s (%s)", w.Team, w.Role)
		} else {
			p += "; choose one with `cosmicac teams use TEAM`"
		}
		parts = append(parts, p)
	default:
		parts = append(parts, "no team")
	}
	if w.BoundTeam != "" || w.Scope != "" {
		parts = append(parts, fmt.Sprintf("token bound to %s, scope %s", w.BoundTeam, dash(w.Scope)))
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// readPassword asks for a password on the terminal without echo, or reads
// one line of stdin (fromStdin, or when stdin is not a terminal).
func (a *App) readPassword(prompt string, fromStdin bool) (string, error) {
	if f, ok := a.Stdin.(*os.File); ok && !fromStdin && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(a.Stderr, prompt)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(a.Stderr)
		if err != nil {
			return "", fmt.Errorf("read password: %w", err)
		}
		return string(b), nil
	}
	line, err := bufio.NewReader(a.Stdin).ReadString('\n')
	if err != nil && err != io.EOF {
		return "", fmt.Errorf("read password: %w", err)
	}
	pw := strings.TrimRight(line, "\r\n")
	if pw == "" {
		return "", UsageErrorf("no password: type it when asked, or give it on the first line of stdin with --password-stdin")
	}
	return pw, nil
}
