package cli

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

func init() { register((*app).loginCommand) }

func (a *app) loginCommand() *cobra.Command {
	var (
		conn      connFlags
		tokenFile string
	)
	cmd := &cobra.Command{
		Use:   "login [--url URL] [--token TOKEN | --token-file FILE]",
		Short: "Check an API token and save it with the URL for the other commands",
		Long: "Check the token against the API (whoami) and save the URL and token to\n" +
			"USER_CONFIG_DIR/cosmicac/config.yaml (mode 0600; $" + envConfig + " names another file).\n" +
			"Without --token or --token-file the token is read from stdin. The URL defaults to $" + envURL + ",\n" +
			"the saved one, or " + DefaultURL + ". $" + envURL + " and $" + envToken + " still win over the saved file.",
		Example: "  cosmicac login --token-file ~/.local/share/cosmicac/admin.token\n" +
			"  cosmicac login --url https://cosmicac.example.com --token \"$TOKEN\"",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token := conn.token
			switch {
			case token != "" && tokenFile != "":
				return usageErrorf("give --token or --token-file, not both")
			case tokenFile != "":
				data, err := os.ReadFile(tokenFile)
				if err != nil {
					return fmt.Errorf("read token: %w", err)
				}
				token = strings.TrimSpace(string(data))
			case token == "":
				fmt.Fprint(a.stderr, "Token: ")
				line, err := bufio.NewReader(a.stdin).ReadString('\n')
				if err != nil && line == "" {
					return usageErrorf("no token: give --token, --token-file or the token on stdin")
				}
				token = strings.TrimSpace(line)
			}
			if token == "" {
				return usageErrorf("the token is empty")
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
			if err := writeConfigFile(path, clientConfig{URL: c.url, Token: token}); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Logged in to %s as %s (team %s, role %s).\nSaved to %s.\n", c.url, who.User, who.Team, who.Role, path)
			if a.getenv(envToken) != "" || a.getenv(envURL) != "" {
				fmt.Fprintf(a.stderr, "note: $%s or $%s is set and wins over the saved config\n", envURL, envToken)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&conn.url, "url", "", "CosmicAC API URL (default $"+envURL+", the saved URL, or "+DefaultURL+")")
	cmd.Flags().StringVar(&conn.token, "token", "", "API token")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "read the API token from FILE (e.g. DATA_DIR/admin.token)")
	return cmd
}
