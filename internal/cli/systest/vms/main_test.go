package vms

import (
	"os"
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
