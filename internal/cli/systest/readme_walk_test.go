package systest

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/testenv"
)

// TestREADMEWalk is a newcomer's first hour, as the README tells it: `up`
// on embedded defaults, then every command of the README's "Try it"
// section in the README's order (sign in with the admin token's file, a
// job, the job list, a model, an API key, a chat through it, a team, a
// user with a password, a member, a quota, signing in as that user),
// read from README.md itself so that the page cannot drift from what
// works; then, as that user, a job of the team's quota and a shell into
// it. Every command must succeed (issue 32: "a newcomer's walk finds no
// step that fails or hangs without a reason").
func TestREADMEWalk(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home) // up's data directory and the job's login shell
	env := map[string]string{"HOME": home}
	const password = "a long walk in the park"

	var upOut, upErr lockedBuffer
	a := &cli.App{Stdin: strings.NewReader(""), Stdout: &upOut, Stderr: &upErr, Getenv: func(k string) string { return env[k] }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	// The README's `up`, on another port than 8080 and with a quick
	// simulated rack.
	// The README's llama.cpp job needs the engine hack/test.sh builds (HOME
	// here is a fresh one, where up would not find the cache's build).
	llama := os.Getenv("COSMICAC_LLAMA_SERVER")
	_, err := os.Stat(llama)
	testenv.Require(t, llama != "" && err == nil, "COSMICAC_LLAMA_SERVER is not a llama-server (%q): the README's llama.cpp job needs one (hack/build-llama.sh)", llama)
	go func() {
		done <- a.Run(ctx, []string{"up", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--sim-step", "5ms", "--llama-server", llama})
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("up after Ctrl-C: exit %d: %s", code, upErr.String())
		}
	})
	web := regexp.MustCompile(`(?m)^\s*web\s+(http://\S+)/\s`)
	deadline := time.Now().Add(60 * time.Second)
	for !web.MatchString(upOut.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("no banner: %s\n%s", upOut.String(), upErr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	base := web.FindStringSubmatch(upOut.String())[1]

	// The "Try it" section's commands: those before the QEMU rack's.
	var walk []docCommand
	for _, c := range docCommands(t, "../../../README.md", "README.md") {
		if slices.Contains(c.args, "--rack") {
			break
		}
		if c.args[0] != "up" {
			walk = append(walk, c)
		}
	}
	if len(walk) < 10 {
		t.Fatalf("%d commands in the README's walk: the parser missed them (%v)", len(walk), walk)
	}
	run := func(where, stdin string, args ...string) string {
		t.Helper()
		code, out, errs := runCLIIn(t, env, stdin, args...)
		if code != 0 {
			// What up logged last, to tell why (a flake's only trace).
			log := upErr.String()
			if i := len(log) - 16<<10; i > 0 {
				log = log[i:]
			}
			t.Fatalf("%s: cosmicac %s: exit %d\n%s%s\nup's log, its end:\n%s", where, strings.Join(args, " "), code, out, errs, log)
		}
		return out
	}
	key, last := "", ""
	var chats []string // the inference chat commands run
	apiKey := regexp.MustCompile(`(?m)^\s+(sk-\S+)$`)
	for _, c := range walk {
		args := slices.Clone(c.args)
		for i, w := range args {
			switch {
			case w == "http://127.0.0.1:8080":
				args[i] = base
			case strings.HasPrefix(w, "~/"):
				args[i] = filepath.Join(home, w[2:])
			case w == "KEY":
				if key == "" {
					t.Fatalf("%s: the README uses KEY before it makes one", c.where)
				}
				args[i] = key
			}
		}
		stdin := ""
		if slices.Contains(args, "--password") || slices.Contains(args, "--user") {
			stdin = password + "\n"
		}
		out := run(c.where, stdin, args...)
		last = out
		switch strings.Join(c.args[:2], " ") {
		case "api-keys create":
			m := apiKey.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("%s: api-keys create printed no key: %s", c.where, out)
			}
			key = m[1]
		case "jobs list":
			if !strings.Contains(out, "hello") || !strings.Contains(out, "running") {
				t.Errorf("%s: jobs list does not show the running job hello:\n%s", c.where, out)
			}
		case "inference chat":
			if strings.TrimSpace(out) == "" {
				t.Errorf("%s: the chat answered nothing", c.where)
			}
			chats = append(chats, strings.Join(c.args, " "))
		}
	}
	if key == "" {
		t.Error("the README's walk made no API key")
	}
	if !slices.ContainsFunc(chats, func(c string) bool { return strings.Contains(c, "--model tiny:noise") }) {
		t.Errorf("the walk did not chat with the llama.cpp job's adapter: %q", chats)
	}

	// Signed in as the last command left it: a member of ml, with ml's quota.
	if !strings.Contains(last, "alice") || !strings.Contains(last, "ml") {
		t.Fatalf("the README's walk ends with %q, want alice signed in, of ml", last)
	}
	run("walk", "", "jobs", "create", "--name", "mine", "--gpus", "1", "--image", "ubuntu-24.04", "--location", "us", "--wait")
	if out := run("walk", "", "jobs", "shell", "mine", "--", "echo", "walked"); !strings.Contains(out, "walked") {
		t.Errorf("a shell in alice's job printed %q", out)
	}
	if _, err := os.Stat(filepath.Join(home, ".local/share/cosmicac/admin.token")); err != nil {
		t.Errorf("up kept no admin token where the README says: %v", err)
	}
}
