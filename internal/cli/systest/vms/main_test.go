package vms

import (
	"os"
	"runtime"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cli/clitest"
	_ "github.com/cosmicac/cosmicac/internal/cli/components" // every command, as cmd/cosmicac links them
	"github.com/cosmicac/cosmicac/internal/testenv"
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

// needAMD64Host stops a test that boots the QEMU rack's VMs on a host that
// is not amd64: hack/vm-image.sh builds the guest from the host's own
// Debian architecture (its kernel is linux-image-cloud-amd64), so another
// host has no amd64 guest to boot. It waits for an amd64 host; under CI
// (which is amd64) it fails rather than skips, as a missing image does.
func needAMD64Host(t *testing.T) {
	t.Helper()
	testenv.Require(t, runtime.GOARCH == "amd64",
		"the QEMU rack's guests are linux/amd64, built by hack/vm-image.sh from the host's Debian architecture; this host is %s: run these tests on an amd64 host", runtime.GOARCH)
}
