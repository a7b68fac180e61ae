package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

func (a *App) jobsSSHCommand(conn *connFlags) *cobra.Command {
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
				// Through the API, the job tells which keys its VM admits
				// and its image the user, for the default user and for
				// what to say when ssh fails.
				var job cosmic.Job
				if agentPeer == "" {
					ac, err := a.connect(conn)
					if err != nil {
						return err
					}
					if jobID, err = ac.resolveJobID(cmd.Context(), jobID); err != nil {
						return err
					}
					if job, err = ac.GetJob(cmd.Context(), jobID); err != nil {
						return ac.explain(err)
					}
					if user == "" {
						user = defaultLogin(job.Spec.Image)
					}
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
				c.Stdin, c.Stdout, c.Stderr = a.Stdin, a.Stdout, a.Stderr
				if err := c.Run(); err != nil {
					if ee, ok := err.(*exec.ExitError); ok {
						if ee.ExitCode() == 255 && job.ID != "" {
							// ssh's own failure (a command's 255 is rare):
							// most often a key or user the VM does not take.
							fmt.Fprint(a.Stderr, sshHint(job, user))
						}
						return &exitError{code: ee.ExitCode(), err: silentExit{ee.ExitCode()}}
					}
					return WithExit(ExitFailure, err)
				}
				return nil
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			var c agentapi.Conn
			if agentPeer != "" {
				n, key, err := a.agentNode(agentPeer, keyFile)
				if err != nil {
					return err
				}
				defer n.Close()
				st, err := agentapi.DialTCP(ctx, n, key, agentapi.DefaultSSHPort)
				if err != nil {
					return WithExit(ExitFailure, err)
				}
				c = st
			} else {
				relay, id, err := a.relay(cmd.Context(), conn, jobID)
				if err != nil {
					return err
				}
				if c, err = relay.DialSSH(ctx, id); err != nil {
					return WithExit(ExitFailure, relayError(err))
				}
			}
			defer c.Close()
			done := make(chan struct{})
			go func() {
				io.Copy(c, a.Stdin)
				c.CloseWrite()
			}()
			go func() {
				io.Copy(a.Stdout, c)
				close(done)
			}()
			<-done
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&proxy, "proxy", false, "be ssh's ProxyCommand: splice stdin and stdout to port 22 in the VM")
	f.StringVarP(&user, "login", "l", "", "the user to log in as (default: the image's default user where its name tells, debian or ubuntu; else ssh's)")
	f.StringVar(&agentPeer, "agent", "", "reach the agent directly at KEY@HOST:PORT over the fabric instead of through the API")
	f.StringVar(&keyFile, "key-file", "", "with --agent: the CLI's key file")
	return cmd
}

// defaultLogin is the default user of a cloud image whose name tells its
// distribution (debian-12, ubuntu-24.04, quay.io/containerdisks/ubuntu:24.04):
// the user cloud-init gives the job's SSH keys. "" when the name does not
// tell (ssh then logs in as the local user).
func defaultLogin(image string) string {
	name := strings.ToLower(image[strings.LastIndex(image, "/")+1:])
	for _, d := range []string{"debian", "ubuntu", "fedora"} {
		if rest, ok := strings.CutPrefix(name, d); ok && (rest == "" || strings.IndexAny(rest[:1], "-:_.0123456789") == 0) {
			return d
		}
	}
	return ""
}

// sshHint is what `jobs ssh` adds when ssh fails: the keys the job's VM
// admits, the user it logged in as, and how to give others.
func sshHint(job cosmic.Job, user string) string {
	var b strings.Builder
	if len(job.Spec.SSHPublicKeys) == 0 {
		fmt.Fprintf(&b, "cosmicac: ssh failed (exit 255). Job %s has no SSH key: its VM admits only the keys of its spec's sshPublicKeys (unless its image carries its own). "+
			"Create the job with --ssh-key @$HOME/.ssh/id_ed25519.pub (your public key), or open a shell without a key: cosmicac jobs shell %s\n", job.ID, job.ID)
		return b.String()
	}
	fmt.Fprintf(&b, "cosmicac: ssh failed (exit 255). The VM of job %s admits only the keys of its spec's sshPublicKeys, for the image's default user:\n", job.ID)
	for _, k := range job.Spec.SSHPublicKeys {
		f := strings.Fields(k)
		switch {
		case len(f) >= 3:
			fmt.Fprintf(&b, "  key   %s %s\n", f[0], strings.Join(f[2:], " "))
		case len(f) == 2 && len(f[1]) > 16:
			fmt.Fprintf(&b, "  key   %s …%s\n", f[0], f[1][len(f[1])-16:])
		default:
			fmt.Fprintf(&b, "  key   %s\n", k)
		}
	}
	if user != "" {
		fmt.Fprintf(&b, "  user  %s (the default user of image %s; -l USER for another)\n", user, job.Spec.Image)
	} else {
		fmt.Fprintf(&b, "  user  your local user, as ssh chose it: give the image's default user with -l (debian on Debian cloud images, ubuntu on Ubuntu's)\n")
	}
	fmt.Fprintf(&b, "Give ssh the private half of one of those keys: cosmicac jobs ssh %s -- -i ~/.ssh/id_ed25519. "+
		"cosmicac jobs shell %s needs no key.\n", job.ID, job.ID)
	return b.String()
}
