// Package testenv says what a test may do when something it needs is
// missing from the machine: skip, saying what is missing and how to get
// it, on a developer's machine; fail under CI (the environment variable CI
// set, as .ci/run and hack/test.sh run), where everything the suite needs
// is installed and a skip would hide a test that never ran. Tests and test
// harnesses import it; production code does not (archtest).
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// CI reports whether the tests run under CI: then nothing they need may
// be missing.
func CI() bool { return os.Getenv("CI") != "" }

// Require skips t, or fails it under CI, with the message format gives,
// unless ok.
func Require(t testing.TB, ok bool, format string, args ...any) {
	t.Helper()
	if ok {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if CI() {
		t.Fatalf("CI is set, so this test must run, but: %s", msg)
		return
	}
	t.Skip(msg)
}

// RequireCommands is Require for commands on PATH: hint says how to
// install them ("apt-get install openssh-server", "hack/install-deps.sh
// installs it").
func RequireCommands(t testing.TB, hint string, commands ...string) {
	t.Helper()
	var missing []string
	for _, c := range commands {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	Require(t, len(missing) == 0, "%s not found (%s)", strings.Join(missing, ", "), hint)
}
