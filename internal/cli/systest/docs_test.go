package systest

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// componentCommands are documented on pages of their own (docs/architecture.md
// and the component's page), not in docs/cli.md, which covers the user
// commands: each of these must be named on some page of docs/.
var componentCommands = []string{"agent", "app-node", "proxy-inference", "wrk-directory", "wrk-monitor", "wrk-ork",
	"wrk-server-k8s-nvidia", "wrk-server-sim", "wrk-server-qemu", "qemu-relay", "keys", "rpc", "gateway"}

// docs/cli.md is checked against the CLI: every command and flag the page
// names exists, and every user command of the CLI has a heading on the
// page (and every component command is named on some page of docs/).
func TestCLIDocMatchesTheCommands(t *testing.T) {
	root := (&cli.App{Getenv: func(string) string { return "" }}).RootCommand()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	page, err := os.ReadFile("../../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	headed := map[string]bool{} // command paths with a heading
	var section []*cobra.Command
	inCode := false
	backticked := regexp.MustCompile("`([^`]+)`")
	for n, line := range strings.Split(string(page), "\n") {
		where := func() string { return "docs/cli.md:" + strconv.Itoa(n+1) }
		switch {
		case strings.HasPrefix(line, "```"):
			inCode = !inCode
			continue
		case inCode:
			// An example: a command line after a prompt.
			if cl, ok := strings.CutPrefix(strings.TrimSpace(line), "$ "); ok && strings.HasPrefix(cl, "cosmicac ") {
				checkCommandLine(t, where(), root, cl)
			}
			continue
		case strings.HasPrefix(line, "#"):
			section = nil
			var parent *cobra.Command
			for _, m := range backticked.FindAllStringSubmatch(line, -1) {
				text := m[1]
				var c *cobra.Command
				if rest, ok := strings.CutPrefix(text, "cosmicac "); ok {
					c = walk(root, rest)
				} else if parent != nil {
					// "`cosmicac jobs restart ID`, `kill ID`" or
					// "…, `inference chat`": the rest of the heading names
					// its commands without the root, or without the group.
					if c = walk(root, text); c == nil {
						c = walk(parent, text)
					}
				}
				if c == nil || c == root || c == parent {
					continue
				}
				section = append(section, c)
				headed[c.CommandPath()] = true
				parent = c.Parent()
				checkCommandLine(t, where(), root, c.CommandPath()+" "+strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(text, "cosmicac "), strings.TrimPrefix(c.CommandPath(), "cosmicac "))))
			}
			continue
		}
		// Prose: a flag in backticks is one of the section's commands', or
		// the backticked text is a command line of its own.
		for _, m := range backticked.FindAllStringSubmatch(line, -1) {
			text := m[1]
			if strings.HasPrefix(text, "cosmicac ") {
				checkCommandLine(t, where(), root, text)
				continue
			}
			if len(section) == 0 {
				continue
			}
			for _, f := range flagsIn(text) {
				if !slices.ContainsFunc(section, func(c *cobra.Command) bool { return c.Flag(f) != nil }) {
					t.Errorf("%s: --%s is not a flag of %s", where(), f, paths(section))
				}
			}
		}
	}
	var each func(c *cobra.Command)
	each = func(c *cobra.Command) {
		name := strings.TrimPrefix(c.CommandPath(), "cosmicac ")
		top := strings.Fields(name)[0]
		switch {
		case c == root:
		case slices.Contains(componentCommands, top), top == "help":
			return
		case top == "completion":
			if !strings.Contains(string(page), "cosmicac completion") {
				t.Errorf("docs/cli.md does not show cosmicac completion")
			}
			return
		case !c.HasSubCommands() && !headed[c.CommandPath()]:
			t.Errorf("docs/cli.md has no heading for %s", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			each(sub)
		}
	}
	each(root)
	docs, err := filepath.Glob("../../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, d := range docs {
		b, _ := os.ReadFile(d)
		all.Write(b)
	}
	for _, c := range root.Commands() {
		if slices.Contains(componentCommands, c.Name()) && !strings.Contains(all.String(), "cosmicac "+c.Name()) {
			t.Errorf("no page of docs/ names cosmicac %s", c.Name())
		}
	}
}

// walk follows the words of text from c down the command tree, as far as
// they name subcommands (or their aliases), and returns the last one.
func walk(c *cobra.Command, text string) *cobra.Command {
	found := false
	for _, w := range strings.Fields(text) {
		next := (*cobra.Command)(nil)
		for _, sub := range c.Commands() {
			if sub.Name() == w || slices.Contains(sub.Aliases, w) {
				next = sub
			}
		}
		if next == nil {
			break
		}
		c, found = next, true
	}
	if !found {
		return nil
	}
	return c
}

// checkCommandLine checks that a command line of the page names a command,
// and that each of its flags is that command's.
func checkCommandLine(t *testing.T, where string, root *cobra.Command, line string) {
	t.Helper()
	line, _, _ = strings.Cut(line, " | ") // a pipe's next command is someone else's
	rest := strings.TrimPrefix(line, "cosmicac ")
	if strings.HasPrefix(rest, "-") {
		return // a root flag alone (cosmicac --version)
	}
	c := walk(root, rest)
	if c == nil {
		t.Errorf("%s: %q names no command", where, line)
		return
	}
	if words := strings.Fields(strings.TrimPrefix(c.CommandPath(), "cosmicac")); c.HasSubCommands() {
		// A group takes no argument: a word after it is a subcommand it lacks.
		if all := strings.Fields(rest); len(all) > len(words) && !strings.HasPrefix(all[len(words)], "-") {
			t.Errorf("%s: %s has no command %q (%q)", where, c.CommandPath(), all[len(words)], line)
		}
	}
	args, _, _ := strings.Cut(" "+rest+" ", " -- ") // after --: the job's command or ssh's
	for _, f := range flagsIn(args) {
		if c.Flag(f) == nil {
			t.Errorf("%s: --%s is not a flag of %s (%q)", where, f, c.CommandPath(), line)
		}
	}
}

var flagPattern = regexp.MustCompile(`(?:^|[\s\[(|])--([a-z][a-z0-9-]*)`)

// flagsIn are the long flags text names.
func flagsIn(text string) []string {
	var out []string
	for _, m := range flagPattern.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

func paths(cs []*cobra.Command) string {
	var p []string
	for _, c := range cs {
		p = append(p, c.CommandPath())
	}
	return strings.Join(p, ", ")
}

// docCommand is one cosmicac command line of a page's code block.
type docCommand struct {
	where string
	args  []string
}

// docCommands are the cosmicac command lines of the code blocks of a
// markdown page: `cosmicac …`, `./cosmicac …`, `go run ./cmd/cosmicac …`,
// after a `$ ` prompt or none, continued over `\` line ends, each command
// of a `&&`, `;` or `|` chain on its own. Placeholders (`...`, `…`) and
// comments are dropped.
func docCommands(t *testing.T, path, name string) []docCommand {
	t.Helper()
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []docCommand
	inCode, heredoc, lang := false, "", ""
	var cont strings.Builder
	start := 0
	lines := strings.Split(string(page), "\n")
	for n, line := range lines {
		if fence, ok := strings.CutPrefix(strings.TrimSpace(line), "```"); ok {
			inCode, heredoc, lang = !inCode, "", fence
			cont.Reset()
			continue
		}
		if !inCode {
			continue
		}
		switch lang {
		case "sh", "bash", "shell":
		case "console":
			// Commands after a prompt; the rest is their output.
			if cont.Len() == 0 && !strings.HasPrefix(strings.TrimSpace(line), "$ ") {
				continue
			}
		case "":
			// A synopsis (`[--follow|-f]`) or a drawing is not a command.
			if strings.ContainsAny(line, "[·│─→") {
				continue
			}
		default:
			continue
		}
		if heredoc != "" {
			if strings.TrimSpace(line) == heredoc {
				heredoc = ""
			}
			continue
		}
		if cont.Len() == 0 {
			start = n + 1
		}
		l := strings.TrimSpace(line)
		l = strings.TrimPrefix(l, "$ ")
		if b, ok := strings.CutSuffix(l, "\\"); ok {
			cont.WriteString(b + " ")
			continue
		}
		cont.WriteString(l)
		full := cont.String()
		cont.Reset()
		if i := strings.Index(full, "<<"); i >= 0 {
			heredoc = strings.Trim(strings.Fields(full[i+2:] + " x")[0], `'"-`)
			full = full[:i]
		}
		for _, part := range regexp.MustCompile(`&&|\|\||;|\|`).Split(full, -1) {
			words := shellWords(part)
			for len(words) > 0 && (words[0] == "sudo" || strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-")) {
				words = words[1:] // sudo, VAR=value
			}
			switch {
			case len(words) > 2 && words[0] == "go" && words[1] == "run" && strings.HasSuffix(words[2], "cmd/cosmicac"):
				words = words[3:]
			case len(words) > 0 && (words[0] == "cosmicac" || words[0] == "./cosmicac"):
				words = words[1:]
			default:
				continue
			}
			words = slices.DeleteFunc(words, func(w string) bool { return w == "..." || w == "…" || strings.HasPrefix(w, "…") })
			for i, w := range words {
				if strings.HasPrefix(w, ">") || strings.HasPrefix(w, "<") || strings.HasPrefix(w, "2>") {
					words = words[:i] // a redirection and what follows
					break
				}
			}
			out = append(out, docCommand{where: name + ":" + strconv.Itoa(start), args: words})
		}
	}
	return out
}

// shellWords splits a command as a POSIX shell would, roughly: quotes
// kept together, a # comment dropped.
func shellWords(s string) []string {
	var words []string
	var w strings.Builder
	in, quote, any := false, rune(0), false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, any = r, true
		case r == '#' && !in:
			if any || w.Len() > 0 {
				words = append(words, w.String())
			}
			return words
		case r == ' ' || r == '\t':
			if in || any {
				words = append(words, w.String())
				w.Reset()
			}
			in, any = false, false
			continue
		default:
			w.WriteRune(r)
		}
		in = true
	}
	if in || any {
		words = append(words, w.String())
	}
	return words
}

// Every cosmicac command line of a code block of README.md and docs/*.md
// parses as the CLI has it: the command exists, its flags are its own, and
// it takes as many arguments as given. The command tree runs each with
// its RunE swapped for one that does nothing, so flags and argument
// counts are checked by cobra itself (issue 32: docs/qemu-rack.md's
// `racks register qemu-1 …` was refused by the CLI).
func TestDocCommandsParse(t *testing.T) {
	pages, err := filepath.Glob("../../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{"../../../README.md"}, pages...)
	total := 0
	for _, p := range pages {
		for _, c := range docCommands(t, p, strings.TrimPrefix(p, "../../../")) {
			total++
			root := (&cli.App{Getenv: func(string) string { return "" }}).RootCommand()
			root.InitDefaultHelpCmd()
			root.InitDefaultCompletionCmd()
			ran := false
			var each func(c *cobra.Command)
			each = func(c *cobra.Command) {
				if c.RunE != nil || c.Run != nil {
					c.Run, c.RunE = nil, func(*cobra.Command, []string) error { ran = true; return nil }
				}
				c.PreRunE, c.PreRun, c.PersistentPreRunE, c.PersistentPreRun = nil, nil, nil, nil
				for _, s := range c.Commands() {
					each(s)
				}
			}
			each(root)
			root.SetOut(io.Discard)
			root.SetErr(io.Discard)
			root.SetArgs(c.args)
			if err := root.Execute(); err != nil {
				t.Errorf("%s: cosmicac %s: %v", c.where, strings.Join(c.args, " "), err)
			} else if !ran && !slices.Contains(c.args, "--help") && !slices.Contains(c.args, "--version") {
				t.Errorf("%s: cosmicac %s runs no command", c.where, strings.Join(c.args, " "))
			}
		}
	}
	if total < 50 {
		t.Errorf("%d command lines found in README.md and docs/: the parser missed them", total)
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
	walk((&cli.App{Getenv: func(string) string { return "" }}).RootCommand())
}
