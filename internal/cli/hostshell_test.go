package cli

import (
	"os"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/cosmictest"
	"github.com/cosmicac/cosmicac/internal/platform"
)

// On the simulated rack a job's shell runs on the platform's host: every
// session says so first, on stderr (a command's stdout stays its own), and
// with host shells off (`up --sim-host-shells=false`) shells and ssh are
// refused, saying why (issue 32).
func TestSimulatedRackShellsSayTheHost(t *testing.T) {
	shellEnv := func(t *testing.T, off bool) (*cosmictest.Env, map[string]string, string) {
		e := cosmictest.NewEnv(t, func(c *platform.Config) { c.Sim.NoHostShells = off })
		tok, err := e.P.AdminToken()
		if err != nil {
			t.Fatal(err)
		}
		j := e.Create(cosmictest.Container("box", 1))
		e.WaitState(j.ID, cosmic.StateRunning)
		return e, map[string]string{"COSMICAC_URL": e.P.URL, "COSMICAC_TOKEN": tok, "HOME": t.TempDir()}, j.ID
	}
	t.Run("on", func(t *testing.T) {
		_, env, id := shellEnv(t, false)
		for range 2 { // every time
			code, out, errs := runCLI(t, env, "jobs", "shell", id, "--", "echo", "hi")
			if code != 0 || out != "hi\n" {
				t.Fatalf("jobs shell: exit %d, stdout %q, stderr %q", code, out, errs)
			}
			if !strings.HasPrefix(errs, "CosmicAC: this job runs on the simulated rack, where no VM runs. This shell runs on the\nplatform's host, as ") ||
				!strings.Contains(errs, "it is not a VM") || !strings.Contains(errs, "--sim-host-shells=false") {
				t.Errorf("jobs shell does not say where it runs:\n%s", errs)
			}
		}
	})
	t.Run("off", func(t *testing.T) {
		needOpenSSHClient(t)
		e, env, id := shellEnv(t, true)
		code, out, errs := runCLI(t, env, "jobs", "shell", id, "--", "echo", "hi")
		if code != 126 || out != "" || errs != platform.HostShellsOff {
			t.Errorf("jobs shell with host shells off: exit %d, stdout %q, stderr %q", code, out, errs)
		}
		// jobs ssh: the simulated sshd admits nobody, and its banner says why.
		for k, v := range env {
			t.Setenv(k, v)
		}
		t.Setenv("COSMICAC_TEST_MAIN", "1")
		t.Setenv("SSH_AUTH_SOCK", "")
		key := sshKeygen(t, t.TempDir(), "k")
		j := e.Create(cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: "keyed", Location: "us", Image: "debian-12",
			Resources: cosmic.Resources{GPU: 1}, SSHPublicKeys: []string{readPub(t, key)}})
		e.WaitState(j.ID, cosmic.StateRunning)
		code, out, errs = runCLI(t, env, "jobs", "ssh", j.ID, "--", "-F", "/dev/null", "-i", key, "-o", "IdentitiesOnly=yes",
			"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "echo", "hi")
		if code != 255 || out != "" || !strings.Contains(errs, "shells are turned off on this platform's simulated rack") {
			t.Errorf("jobs ssh with host shells off: exit %d, stdout %q, stderr %q", code, out, errs)
		}
	})
}

// readPub reads the public half of an ssh-keygen key.
func readPub(t *testing.T, key string) string {
	t.Helper()
	b, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
