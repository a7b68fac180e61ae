package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/cosmictest"
	"github.com/cosmicac/cosmicac/internal/testenv"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// needOpenSSHClient is needBinaries for Debian's ssh client.
func needOpenSSHClient(t *testing.T) {
	t.Helper()
	needBinaries(t, "openssh-client", "ssh", "ssh-keygen", "scp")
}

// needBinaries skips the test when one of bins is not on PATH, naming it
// and the Debian packages that hold it, and fails it instead when CI is
// set: .ci/run installs them, so CI never skips what it can run.
func needBinaries(t *testing.T, packages string, bins ...string) {
	t.Helper()
	testenv.RequireCommands(t, "apt-get install "+packages, bins...)
}

// sshKeygen writes a fresh ed25519 key pair to dir/name and dir/name.pub.
func sshKeygen(t *testing.T, dir, name string) string {
	t.Helper()
	k := filepath.Join(dir, name)
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", k).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	return k
}

// TestJobsSSHOnTheSimulatedRack (issue 12): with the platform's defaults,
// as `cosmicac up` runs it, `cosmicac jobs ssh JOB` reaches the replica's
// simulated sshd (internal/simsshd) with Debian's ssh, admitted by the key
// the job was created with, for commands and scp; another key is refused.
func TestJobsSSHOnTheSimulatedRack(t *testing.T) {
	needOpenSSHClient(t)
	e := cosmictest.NewEnv(t)
	tok, err := e.P.AdminToken()
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
	t.Setenv("SSH_AUTH_SOCK", "") // no keys but the one named
	dir := t.TempDir()
	key, wrong := sshKeygen(t, dir, "admitted"), sshKeygen(t, dir, "other")

	code, out, errs := runCLI(t, env, "jobs", "create", "--location", "us", "--image", "ubuntu:24.04", "--gpus", "1",
		"--name", "workstation", "--ssh-key", "@"+key+".pub", "-o", "json")
	if code != 0 {
		t.Fatalf("jobs create: exit %d: %s", code, errs)
	}
	var j struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.ID == "" {
		t.Fatalf("jobs create printed %q: %v", out, err)
	}
	e.WaitState(j.ID, cosmic.StateRunning)

	ssh := func(k string, command ...string) (int, string, string) {
		args := append([]string{"jobs", "ssh", j.ID, "--", "-F", "/dev/null", "-i", k, "-o", "IdentitiesOnly=yes",
			"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
			"-o", "BatchMode=yes"}, command...)
		return runCLI(t, env, args...)
	}
	if code, out, errs := ssh(key, "echo", "hi"); code != 0 || out != "hi\n" {
		t.Fatalf("jobs ssh … echo hi: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// The session runs in the replica's home, and its exit code is the
	// CLI's.
	if code, out, errs := ssh(key, `cd && pwd && exit 7`); code != 7 || !strings.HasSuffix(strings.TrimSpace(out), j.ID+"-r0") {
		t.Fatalf("jobs ssh … exit 7: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// With -tt the session has a PTY, with the client's TERM.
	t.Setenv("TERM", "vt100")
	if code, out, errs := ssh(key, "-tt", `test -t 0 && echo "tty $TERM"`); code != 0 || out != "tty vt100\r\n" {
		t.Fatalf("jobs ssh -tt: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// scp (over sftp, OpenSSH's default since 9.0) with the ProxyCommand
	// `jobs ssh` gives ssh: a relative path is in the replica's home.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "src.txt")
	if err := os.WriteFile(src, []byte("through the fabric\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	scp := exec.Command("scp", "-s", "-F", "/dev/null", "-i", key, "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes",
		"-o", "ProxyCommand="+strings.Join([]string{self, "jobs", "ssh", "--proxy", j.ID}, " "), src, "cosmicac-"+j.ID+":copied.txt")
	if out, err := scp.CombinedOutput(); err != nil {
		t.Fatalf("scp: %v: %s", err, out)
	}
	if code, out, errs := ssh(key, "cat", "copied.txt"); code != 0 || out != "through the fabric\n" {
		t.Fatalf("jobs ssh … cat copied.txt: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	if code, out, errs := ssh(wrong, "echo", "hi"); code != 255 || out != "" || !strings.Contains(errs, "Permission denied (publickey)") {
		t.Fatalf("jobs ssh with another key: exit %d, stdout %q, stderr %q", code, out, errs)
	} else if !strings.Contains(errs, "admits only the keys of its spec's sshPublicKeys") || !strings.Contains(errs, "key   ssh-ed25519 admitted\n") ||
		!strings.Contains(errs, "user  ubuntu (the default user of image ubuntu:24.04") || !strings.Contains(errs, "-- -i ") {
		// Not a bare "Permission denied": which key and user the VM takes.
		t.Errorf("jobs ssh with another key does not say which key and user to use:\n%s", errs)
	}
	// A job created without a key: ssh is refused, and told why and the fix.
	code, out, errs = runCLI(t, env, "jobs", "create", "--location", "us", "--image", "debian-12", "--gpus", "1", "--name", "keyless", "-o", "json")
	if code != 0 {
		t.Fatalf("jobs create keyless: exit %d: %s", code, errs)
	}
	var keyless struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(out), &keyless); err != nil {
		t.Fatal(err)
	}
	e.WaitState(keyless.ID, cosmic.StateRunning)
	if code, out, errs := runCLI(t, env, "jobs", "ssh", "keyless", "--", "-F", "/dev/null", "-i", key, "-o", "IdentitiesOnly=yes",
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "echo", "hi"); code != 255 || out != "" ||
		!strings.Contains(errs, "Job "+keyless.ID+" has no SSH key") || !strings.Contains(errs, "--ssh-key @") || !strings.Contains(errs, "cosmicac jobs shell "+keyless.ID) {
		t.Errorf("jobs ssh to a job without a key: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	// The simulated sshd recorded the sessions in the job's system log.
	var opened, closed int
	if !waittest.Poll(10*time.Second, func() bool {
		opened, closed = 0, 0
		err := e.Client.JobLogs(e.Ctx, j.ID, client.LogOptions{}, func(ev client.LogEvent) error {
			switch r := ev.Record; {
			case r == nil:
			case strings.Contains(r.Line, "ssh session") && strings.Contains(r.Line, "opened by"):
				opened++
			case strings.Contains(r.Line, "ssh session") && strings.Contains(r.Line, "exit code 7"):
				closed++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return opened == 5 && closed == 1
	}) {
		t.Fatalf("%d ssh sessions opened and %d closed with 7 in the job's log, want 5 (echo, exit, -tt, scp, cat) and 1", opened, closed)
	}
}

// The user `jobs ssh` logs in as by default: the image's default user
// where its name tells it (a QEMU rack's debian-12 takes debian, not the
// local user).
func TestDefaultLogin(t *testing.T) {
	for image, want := range map[string]string{
		"debian-12": "debian", "debian": "debian", "ubuntu-24.04": "ubuntu", "ubuntu:24.04": "ubuntu",
		"quay.io/containerdisks/ubuntu:24.04": "ubuntu", "Fedora-41": "fedora",
		"debianish": "", "nvcr.io/nvidia/pytorch:24.01": "", "": "", "myorg/ubuntu-tools/app": "",
	} {
		if got := defaultLogin(image); got != want {
			t.Errorf("defaultLogin(%q) = %q, want %q", image, got, want)
		}
	}
}
