package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cosmicac/cosmicac/internal/apiv1"
)

func init() { Register((*App).datastoresCommand) }

func (a *App) datastoresCommand() *cobra.Command {
	var conn connFlags
	cmd := &cobra.Command{
		Use:     "datastores",
		Aliases: []string{"datastore"},
		Short:   "Register, list and remove your team's object storage endpoints (team admins change them)",
		Long: "A datastore is an S3-compatible endpoint with credentials, under an alias of your team; jobs'\n" +
			"volumes name it (docs/data.md). Its secret key is written, never shown again: the platform\n" +
			"keeps it sealed and gives jobs short-lived signed requests, never the key.",
	}
	conn.add(cmd)
	cmd.AddCommand(a.datastoresAddCommand(&conn), a.datastoresListCommand(&conn), a.datastoresGetCommand(&conn),
		a.datastoresCredentialsCommand(&conn),
		a.deleteCommand(&conn, "datastore", "Remove a datastore of your team (its sealed credentials with it)", (*apiConn).DeleteDatastore))
	return cmd
}

// datastoreCredentials reads a datastore's credentials: the access key
// from its flag, the secret key from the terminal (not echoed) or from the
// first line of stdin; never from a flag, which ps and shell histories
// keep.
func (a *App) datastoreCredentials(accessKey string, secretStdin bool) (apiv1.DatastoreCredentials, error) {
	if accessKey == "" {
		return apiv1.DatastoreCredentials{}, UsageErrorf("--access-key is required (the secret key is read from the terminal or, with --secret-key-stdin, stdin)")
	}
	if !secretStdin && !a.stdinTerminal() {
		return apiv1.DatastoreCredentials{}, UsageErrorf("the secret key: give --secret-key-stdin and its first line on stdin, or run on a terminal to be asked")
	}
	var secret string
	if secretStdin {
		line, err := bufio.NewReader(a.Stdin).ReadString('\n')
		if err != nil && err != io.EOF {
			return apiv1.DatastoreCredentials{}, fmt.Errorf("read the secret key: %w", err)
		}
		secret = strings.TrimRight(line, "\r\n")
	} else {
		fmt.Fprint(a.Stderr, "Secret key: ")
		f := a.Stdin.(*os.File) // a terminal (checked above)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(a.Stderr)
		if err != nil {
			return apiv1.DatastoreCredentials{}, fmt.Errorf("read the secret key: %w", err)
		}
		secret = string(b)
	}
	if secret == "" {
		return apiv1.DatastoreCredentials{}, UsageErrorf("no secret key: type it when asked, or give it on the first line of stdin with --secret-key-stdin")
	}
	return apiv1.DatastoreCredentials{AccessKey: accessKey, SecretKey: secret}, nil
}

func (a *App) datastoresAddCommand(conn *connFlags) *cobra.Command {
	var (
		out                      outputFlag
		endpoint, region, access string
		secretStdin              bool
	)
	cmd := withOutput(&cobra.Command{
		Use:   "add ALIAS --endpoint URL --access-key KEY [--secret-key-stdin]",
		Short: "Register an S3-compatible endpoint of your team under ALIAS (team admins)",
		Long: "Register a datastore: --endpoint is scheme://host[:port] (buckets and prefixes are volumes'),\n" +
			"--region what it signs for (default us-east-1). The secret key is asked for on a terminal,\n" +
			"or read from stdin's first line with --secret-key-stdin. The endpoint is not contacted now:\n" +
			"a wrong one shows as a job's sync reason.",
		Example: "  cosmicac datastores add main --endpoint https://s3.example.net --access-key AKIA… \n" +
			"  printf '%s\\n' \"$SECRET\" | cosmicac datastores add main --endpoint http://10.0.0.9:9000 --access-key AK --secret-key-stdin",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if endpoint == "" {
				return UsageErrorf("--endpoint is required: scheme://host[:port], such as https://s3.example.net")
			}
			creds, err := a.datastoreCredentials(access, secretStdin)
			if err != nil {
				return err
			}
			return a.withAPI(conn, func(c *apiConn) error {
				d, err := c.CreateDatastore(cmd.Context(), apiv1.CreateDatastore{Alias: args[0], Endpoint: endpoint, Region: region, Credentials: creds})
				if err != nil {
					return c.explain(err)
				}
				return a.printResult(&out, d, "datastore %s of team %s: %s (%s)\n", d.Alias, d.Team, d.Endpoint, d.Region)
			})
		},
	}, &out)
	cmd.Flags().StringVar(&endpoint, "endpoint", "", "the endpoint, scheme://host[:port]")
	cmd.Flags().StringVar(&region, "region", "", "the region requests are signed for (default us-east-1)")
	cmd.Flags().StringVar(&access, "access-key", "", "the access key ID")
	cmd.Flags().BoolVar(&secretStdin, "secret-key-stdin", false, "read the secret key from the first line of stdin")
	return cmd
}

func (a *App) datastoresCredentialsCommand(conn *connFlags) *cobra.Command {
	var (
		out         outputFlag
		access      string
		secretStdin bool
	)
	cmd := withOutput(&cobra.Command{
		Use:   "credentials ALIAS --access-key KEY [--secret-key-stdin]",
		Short: "Replace a datastore's credentials (team admins)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			creds, err := a.datastoreCredentials(access, secretStdin)
			if err != nil {
				return err
			}
			return a.withAPI(conn, func(c *apiConn) error {
				d, err := c.SetDatastoreCredentials(cmd.Context(), args[0], creds)
				if err != nil {
					return c.explain(err)
				}
				return a.printResult(&out, d, "datastore %s of team %s: credentials replaced\n", d.Alias, d.Team)
			})
		},
	}, &out)
	cmd.Flags().StringVar(&access, "access-key", "", "the new access key ID")
	cmd.Flags().BoolVar(&secretStdin, "secret-key-stdin", false, "read the new secret key from the first line of stdin")
	return cmd
}

func (a *App) datastoresListCommand(conn *connFlags) *cobra.Command {
	var out outputFlag
	return withOutput(&cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List your team's datastores (never their secret keys)",
		Args:    cobra.NoArgs,
		RunE: a.api(conn, func(cmd *cobra.Command, _ []string, c *apiConn) error {
			l, err := c.ListDatastores(cmd.Context())
			if err != nil {
				return c.explain(err)
			}
			if l == nil {
				l = []apiv1.Datastore{}
			}
			if ok, err := out.structured(a.Stdout, apiv1.DatastoreList{Items: l, Total: len(l)}); ok {
				return err
			}
			if len(l) == 0 {
				fmt.Fprintln(a.Stderr, "no datastores: a team admin registers one with `cosmicac datastores add ALIAS --endpoint URL --access-key KEY`")
				return nil
			}
			return a.printDatastores(l)
		}),
	}, &out)
}

func (a *App) datastoresGetCommand(conn *connFlags) *cobra.Command {
	var out outputFlag
	return withOutput(&cobra.Command{
		Use:   "get ALIAS",
		Short: "Show a datastore of your team (never its secret key)",
		Args:  cobra.ExactArgs(1),
		RunE: a.api(conn, func(cmd *cobra.Command, args []string, c *apiConn) error {
			d, err := c.GetDatastore(cmd.Context(), args[0])
			if err != nil {
				return c.explain(err)
			}
			if ok, err := out.structured(a.Stdout, d); ok {
				return err
			}
			return a.printDatastores([]apiv1.Datastore{d})
		}),
	}, &out)
}

func (a *App) printDatastores(l []apiv1.Datastore) error {
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ALIAS\tTEAM\tTYPE\tENDPOINT\tREGION\tACCESS KEY\tCREATED BY\tAGE\tCREDENTIALS CHANGED")
	for _, d := range l {
		changed := "-"
		if !d.UpdatedAt.IsZero() {
			changed = age(d.UpdatedAt) + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Alias, d.Team, d.Type, d.Endpoint, d.Region, dash(d.AccessKeyHint), dash(d.CreatedBy), age(d.CreatedAt), changed)
	}
	return tw.Flush()
}
