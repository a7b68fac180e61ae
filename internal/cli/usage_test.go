package cli

import (
	"regexp"
	"strings"
	"testing"
)

// A wrong command line exits 2 and says what would be right; it never
// prints a group's help and exits 0.
func TestWrongCommandLinesExit2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs", "lsit"}, "Did you mean this?\n\tlist"},
		{[]string{"racks", "lst"}, "Did you mean this?\n\tlist"},
		{[]string{"jobs", "frobnicate"}, `unknown command "frobnicate" for "cosmicac jobs"`},
		{[]string{"lsit"}, `unknown command "lsit" for "cosmicac"`},
		{[]string{"jobs", "list", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"jobs", "list", "--url", "127.0.0.1:8080"}, `"127.0.0.1:8080" must be http:// or https://`},
		{[]string{"jobs", "create", "--location", "us", "--image", "x", "--gpus", "0"}, "--gpus: 0: give at least 1"},
	} {
		code, out, errs := runCLI(t, nil, tc.args...)
		if code != ExitUsage || !strings.Contains(errs, tc.want) || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, out, errs, tc.want)
		}
	}
	// A group alone still shows its commands.
	if code, out, _ := runCLI(t, nil, "jobs"); code != 0 || !strings.Contains(out, "Available Commands") {
		t.Errorf("jobs: exit %d, %q", code, out)
	}
}

// waitLines are the lines --wait printed on stderr, each without its
// elapsed time ("[12s] "), which it must have.
func waitLines(stderr string) []string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	for i, l := range lines {
		if m := elapsedPrefix.FindString(l); m != "" {
			lines[i] = l[len(m):]
		}
	}
	return lines
}

var elapsedPrefix = regexp.MustCompile(`^\[(\d+s|\d+m\d\ds)\] `)
