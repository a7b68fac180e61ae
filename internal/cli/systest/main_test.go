package systest

import (
	"os"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cli/clitest"
	_ "github.com/cosmicac/cosmicac/internal/cli/components" // every command, as cmd/cosmicac links them
)

// TestMain lets tests run this test binary as the cosmicac binary, with
// every command (clitest.Main).
func TestMain(m *testing.M) {
	os.Exit(clitest.Main(m, nil))
}

// runCLI runs the command line in-process (clitest.Run).
func runCLI(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	return clitest.Run(t, env, "", args...)
}

// runCLIIn is runCLI with stdin.
func runCLIIn(t *testing.T, env map[string]string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	return clitest.Run(t, env, stdin, args...)
}

type lockedBuffer = clitest.LockedBuffer
