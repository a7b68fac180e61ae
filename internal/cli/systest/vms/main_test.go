package vms

import (
	"os"
	"runtime"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cli/clitest"
	_ "github.com/cosmicac/cosmicac/internal/cli/components" // every command, as cmd/cosmicac links them
)

// TestMain lets tests run this test binary as the cosmicac binary, with
// every command (clitest.Main), and removes the binaries it built.
func TestMain(m *testing.M) {
	os.Exit(clitest.Main(m, func() {
		if agentDir != "" {
			os.RemoveAll(agentDir)
		}
	}))
}

// runCLI runs the command line in-process (clitest.Run).
func runCLI(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	return clitest.Run(t, env, "", args...)
}

// needAMD64Host skips a test that boots the QEMU rack's VMs on a host that
// is not amd64: the rack runs linux/amd64 guests, with the host's own
// architecture's acceleration only. It waits for an amd64 host (CI's is).
func needAMD64Host(t *testing.T) {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skipf("the QEMU rack runs linux/amd64 guests; this host is %s, and runs them only on an amd64 host", runtime.GOARCH)
	}
}
