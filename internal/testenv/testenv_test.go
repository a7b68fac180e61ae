package testenv

import (
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a test ended.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Skip(args ...any)                  { r.skipped = args[0].(string) }
func (r *recorder) Fatalf(format string, args ...any) { r.failed = format }

func TestRequire(t *testing.T) {
	t.Setenv("CI", "")
	r := &recorder{TB: t}
	Require(r, true, "never")
	if r.skipped != "" || r.failed != "" {
		t.Fatalf("ok: skipped %q, failed %q", r.skipped, r.failed)
	}
	Require(r, false, "no %s", "sshd")
	if r.skipped != "no sshd" || r.failed != "" {
		t.Errorf("locally: skipped %q, failed %q; want a skip", r.skipped, r.failed)
	}
	t.Setenv("CI", "true")
	r = &recorder{TB: t}
	Require(r, false, "no %s", "sshd")
	if r.skipped != "" || !strings.Contains(r.failed, "CI is set") {
		t.Errorf("under CI: skipped %q, failed %q; want a failure", r.skipped, r.failed)
	}
	r = &recorder{TB: t}
	RequireCommands(r, "apt-get install nothing", "sh", "cosmicac-no-such-command")
	if !strings.Contains(r.failed, "CI is set") {
		t.Errorf("a missing command under CI: failed %q", r.failed)
	}
}
