package cli

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/cosmictest"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// throwawaySSHD starts Debian's sshd on a free loopback port with a temp
// host key and a temp user key it admits (sftp served, for scp). It
// returns the port and the user key's file.
func throwawaySSHD(t *testing.T) (port int, userKey string) {
	t.Helper()
	needBinaries(t, "openssh-server openssh-client", "/usr/sbin/sshd", "ssh", "scp", "ssh-keygen")
	dir := t.TempDir()
	hostKey, userKey := filepath.Join(dir, "host_ed25519"), filepath.Join(dir, "user_ed25519")
	for _, k := range []string{hostKey, userKey} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", k).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v: %s", err, out)
		}
	}
	pub, err := os.ReadFile(userKey + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	auth := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(auth, pub, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("Port %d\nListenAddress 127.0.0.1\nHostKey %s\nAuthorizedKeysFile %s\n"+
		"PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nPermitRootLogin yes\nStrictModes no\n"+
		"Subsystem sftp internal-sftp\nPidFile %s\n", port, hostKey, auth, filepath.Join(dir, "sshd.pid"))), 0o600); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll("/run/sshd", 0o755)
	cmd := exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", cfg)
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sshd: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waittest.NoError(t, func() error {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			c.Close()
		}
		return err
	}, "sshd to listen on %d", port)
	return port, userKey
}

// TestJobsSSHThroughThePlatform: `cosmicac jobs ssh JOB` runs the user's
// ssh with this CLI (the test binary as `cosmicac`, see TestMain) as its
// ProxyCommand, `jobs ssh --proxy JOB`, which goes through the app-node's
// POST /api/v1/jobs/{id}/ssh, the fabric and the job's instance agent to
// sshd in the "VM" (on the simulated rack the host's loopback; the agents'
// port 22 is pointed at a throwaway sshd with platform.Config.AgentSSHPort).
// scp works with the same ProxyCommand.
func TestJobsSSHThroughThePlatform(t *testing.T) {
	port, key := throwawaySSHD(t)
	e := cosmictest.NewEnv(t, func(c *platform.Config) { c.AgentSSHPort = port })
	j := e.Create(cosmictest.Container("workstation", 1))
	e.WaitState(j.ID, cosmic.StateRunning)
	tok, err := e.P.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	// The ProxyCommand is a child of ssh: it reads the platform and token
	// from the real environment, and is this binary as `cosmicac`.
	home := t.TempDir()
	env := map[string]string{"COSMICAC_URL": e.P.URL, "COSMICAC_TOKEN": tok, "HOME": home}
	for k, v := range env {
		t.Setenv(k, v)
	}
	t.Setenv("COSMICAC_TEST_MAIN", "1")
	sshOpts := []string{"-F", "/dev/null", "-i", key, "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes"}

	args := append(append([]string{"jobs", "ssh", j.ID, "-l", u.Username, "--"}, sshOpts...), "echo", "ok")
	code, out, errs := runCLI(t, env, args...)
	if code != 0 || out != "ok\n" {
		t.Fatalf("jobs ssh … echo ok: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// The remote exit code is the CLI's.
	args = append(append([]string{"jobs", "ssh", j.ID, "-l", u.Username, "--"}, sshOpts...), "exit", "7")
	if code, _, errs := runCLI(t, env, args...); code != 7 {
		t.Fatalf("jobs ssh … exit 7: exit %d, stderr %q", code, errs)
	}

	// scp, with the ProxyCommand `jobs ssh` gives ssh.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src.txt"), filepath.Join(dir, "dst.txt")
	if err := os.WriteFile(src, []byte("through the fabric\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	scp := exec.Command("scp", append(append(sshOpts, "-o", "ProxyCommand="+strings.Join([]string{self, "jobs", "ssh", "--proxy", j.ID}, " ")),
		src, u.Username+"@cosmicac-"+j.ID+":"+dst)...)
	if out, err := scp.CombinedOutput(); err != nil {
		t.Fatalf("scp: %v: %s", err, out)
	}
	if b, err := os.ReadFile(dst); err != nil || string(b) != "through the fabric\n" {
		t.Fatalf("copied file: %q %v", b, err)
	}

	// The agent recorded the connections (to the VM's port 22) in the
	// job's log, and the job runs on.
	waittest.NoError(t, func() error {
		var n int
		err := e.Client.JobLogs(e.Ctx, j.ID, client.LogOptions{}, func(ev client.LogEvent) error {
			if ev.Record != nil && strings.Contains(ev.Record.Line, "tcp connection to port 22 opened") {
				n++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n < 3 {
			return fmt.Errorf("%d tcp connections recorded", n)
		}
		return nil
	}, "the job's log to record 3 tcp connections")
	if got, err := e.Client.GetJob(e.Ctx, j.ID); err != nil || got.Status.State != cosmic.StateRunning {
		t.Fatalf("after ssh: %v %v", got.Status.State, err)
	}
}
