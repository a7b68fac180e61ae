package cli

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

func (a *app) jobsSSHCommand(conn *connFlags) *cobra.Command {
	var (
		proxy              bool
		agentPeer, keyFile string
		user               string
	)
	cmd := &cobra.Command{
		Use:   "ssh JOB [-- SSH-ARGS...]",
		Short: "Run your ssh to a GPU container job's VM, through the platform (no open port needed)",
		Long: "Runs ssh with this CLI as its ProxyCommand: the connection to port 22 in the VM goes through\n" +
			"the platform and the job's instance agent. The VM admits the SSH public keys of the job's\n" +
			"spec (sshPublicKeys) for its default user. On cosmicac up's simulated rack, which runs no VM,\n" +
			"an SSH server of CosmicAC's own (simsshd) answers instead, with the same keys, and your session\n" +
			"runs on the platform's host as the platform's user; its banner says so (docs/shell.md).\n" +
			"For scp, rsync or VS Code, use the same\n" +
			"ProxyCommand in ~/.ssh/config:\n\n" +
			"  Host cosmicac-JOB\n    ProxyCommand cosmicac jobs ssh --proxy JOB",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: a.completeJobIDs(conn),
		RunE: func(cmd *cobra.Command, args []string) error {
			jobID := args[0]
			if !proxy {
				self, err := os.Executable()
				if err != nil {
					return err
				}
				pc := []string{self, "jobs", "ssh", "--proxy", jobID}
				if agentPeer != "" {
					pc = append(pc, "--agent", agentPeer)
					if keyFile != "" {
						pc = append(pc, "--key-file", keyFile)
					}
				}
				target := "cosmicac-" + jobID
				if user != "" {
					target = user + "@" + target
				}
				sshArgs := append([]string{"-o", "ProxyCommand=" + strings.Join(pc, " "), target}, args[1:]...)
				c := exec.CommandContext(cmd.Context(), "ssh", sshArgs...)
				c.Stdin, c.Stdout, c.Stderr = a.stdin, a.stdout, a.stderr
				if err := c.Run(); err != nil {
					if ee, ok := err.(*exec.ExitError); ok {
						return &exitError{code: ee.ExitCode(), err: silentExit{ee.ExitCode()}}
					}
					return withExit(ExitFailure, err)
				}
				return nil
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			var c agent.Conn
			if agentPeer != "" {
				key, addrs, err := parsePeerFlag("agent", agentPeer)
				if err != nil {
					return err
				}
				id, err := a.loadCLIIdentity(keyFile)
				if err != nil {
					return err
				}
				n, err := fabric.New(fabric.Config{Component: "cli", Identity: id, Policy: fabric.NewAllowList(key)})
				if err != nil {
					return err
				}
				defer n.Close()
				n.AddAddrs(key, addrs...)
				st, err := agent.DialTCP(ctx, n, key, agent.DefaultSSHPort)
				if err != nil {
					return withExit(ExitFailure, err)
				}
				c = st
			} else {
				ac, err := a.connect(conn)
				if err != nil {
					return err
				}
				if jobID, err = ac.resolveJobID(cmd.Context(), jobID); err != nil {
					return err
				}
				cfg, _ := a.clientConfig(conn)
				if c, err = (agent.HTTPShellDialer{BaseURL: ac.url, Token: cfg.Token}).DialSSH(ctx, jobID); err != nil {
					return withExit(ExitFailure, relayError(err))
				}
			}
			defer c.Close()
			done := make(chan struct{})
			go func() {
				io.Copy(c, a.stdin)
				c.CloseWrite()
			}()
			go func() {
				io.Copy(a.stdout, c)
				close(done)
			}()
			<-done
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&proxy, "proxy", false, "be ssh's ProxyCommand: splice stdin and stdout to port 22 in the VM")
	f.StringVarP(&user, "login", "l", "", "the user to log in as (default: ssh's)")
	f.StringVar(&agentPeer, "agent", "", "reach the agent directly at KEY@HOST:PORT over the fabric instead of through the API")
	f.StringVar(&keyFile, "key-file", "", "with --agent: the CLI's key file")
	return cmd
}
