package cli

import (
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
		{[]string{"wrk-ork", "--data-dir", t.TempDir(), "--lease-ttl", "2s", "--lease-renew", "1500ms"}, "must be positive and at most half the ttl 2s"},
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

// Every flag's help line reads as written: pflag takes a `quoted` word of
// the usage as the flag's value name, which turned `--model` into
// "--model cosmicac jobs get".
func TestFlagUsagesHaveNoBackquotedCommands(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if name, _ := pflag.UnquoteUsage(f); strings.Contains(name, " ") {
				t.Errorf("%s --%s: value name %q (a backquoted phrase in its usage)", c.CommandPath(), f.Name, name)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk((&app{getenv: func(string) string { return "" }}).rootCommand())
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
