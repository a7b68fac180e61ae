package cli

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
)

// TestPeopleOnThePlatform: the people side as an admin and two users run
// it through the CLI on the whole platform: users, teams, members, a
// password login, teams use, jobs kept apart between teams, a scoped
// token, quotas and the audit log.
func TestPeopleOnThePlatform(t *testing.T) {
	_, admin := onPlatform(t)
	run := func(env map[string]string, stdin string, args ...string) string {
		t.Helper()
		code, out, errs := runCLIIn(t, env, stdin, args...)
		if code != 0 {
			t.Fatalf("cosmicac %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
		}
		return out
	}
	fails := func(env map[string]string, want string, args ...string) {
		t.Helper()
		code, out, errs := runCLIIn(t, env, "", args...)
		if code == 0 || !strings.Contains(out+errs, want) {
			t.Errorf("cosmicac %s: exit %d, want a failure with %q:\n%s%s", strings.Join(args, " "), code, want, out, errs)
		}
	}
	run(admin, "", "teams", "create", "ml")
	run(admin, "", "teams", "create", "web")
	run(admin, "alice-password\n", "users", "create", "alice", "--password-stdin")
	run(admin, "bob-password\n", "users", "create", "bob", "--password-stdin")
	run(admin, "", "teams", "members", "add", "alice", "--role", "admin", "--team", "ml")
	run(admin, "", "teams", "members", "add", "alice", "--role", "viewer", "--team", "web")
	run(admin, "", "teams", "members", "add", "bob", "--role", "member", "--team", "web")
	if out := run(admin, "", "teams", "members", "role", "bob", "--role", "member", "--team", "web", "-o", "json"); !strings.Contains(out, `"role": "member"`) && !strings.Contains(out, `"role":"member"`) {
		t.Errorf("members role -o json:\n%s", out)
	}
	if out := run(admin, "", "users", "list"); !strings.Contains(out, "ml:admin,web:viewer") {
		t.Errorf("users list:\n%s", out)
	}

	// Alice signs in with her password (stdin) and chooses a team.
	home := t.TempDir()
	alice := map[string]string{envURL: admin[envURL], "HOME": home}
	if out := run(alice, "alice-password\n", "login", "--user", "alice", "--password-stdin"); !strings.Contains(out, "teams ml, web; choose one") {
		t.Errorf("login: %s", out)
	}
	fails(alice, "no active team", "jobs", "create", "--name", "a", "--location", "us", "--gpus", "1", "--image", "ubuntu:24.04")
	run(alice, "", "teams", "use", "ml")
	if out := run(alice, "", "teams", "list"); !strings.Contains(out, "*  ml") {
		t.Errorf("teams list after use:\n%s", out)
	}
	if c, _ := readConfigFile(filepath.Join(home, ".config", "cosmicac", "config.yaml")); c.Team != "ml" || !strings.HasPrefix(c.Token, "cac_") {
		t.Errorf("saved config %+v", c)
	}
	run(alice, "", "jobs", "create", "--name", "train", "--location", "us", "--gpus", "1", "--image", "ubuntu:24.04", "--label", "app=x")
	// Viewer in web: reads, cannot create.
	webAlice := maps.Clone(alice)
	webAlice[envTeam] = "web"
	fails(webAlice, "viewer in team web", "jobs", "create", "--name", "b", "--location", "us", "--gpus", "1", "--image", "ubuntu:24.04")

	// Bob, in web only, does not see ml's job, by name or in a list.
	bobTok := strings.TrimSpace(run(admin, "", "tokens", "create", "bob-laptop", "-q", "--token", loginToken(t, admin, "bob", "bob-password")))
	bob := map[string]string{envURL: admin[envURL], envToken: bobTok, "HOME": t.TempDir()}
	if out := run(bob, "", "jobs", "list"); strings.Contains(out, "train") {
		t.Errorf("bob sees ml's job:\n%s", out)
	}
	fails(bob, `no job is named "train"`, "jobs", "get", "train")
	fails(bob, "not found", "jobs", "list", "--team", "ml")

	// A read token of alice's, bound to ml with a selector.
	ro := strings.TrimSpace(run(alice, "", "tokens", "create", "ro", "--bind", "ml", "--scope", "read", "--selector", "app=x", "-q"))
	roEnv := map[string]string{envURL: admin[envURL], envToken: ro, "HOME": t.TempDir()}
	if out := run(roEnv, "", "jobs", "list"); !strings.Contains(out, "train") {
		t.Errorf("the read token's list:\n%s", out)
	}
	fails(roEnv, "scope is read", "jobs", "kill", "train")
	fails(roEnv, "scope is read", "tokens", "create", "more")
	if out := run(alice, "", "tokens", "list"); !strings.Contains(out, "ro ") || !strings.Contains(out, "app=x") {
		t.Errorf("tokens list:\n%s", out)
	}
	if out := run(alice, "", "tokens", "revoke", "ro", "-o", "yaml"); !strings.Contains(out, "action: revoked") || !strings.Contains(out, "kind: token") {
		t.Errorf("tokens revoke -o yaml:\n%s", out)
	}
	fails(roEnv, "not logged in or token invalid", "jobs", "list")

	// Quotas: the admin sets, alice (ml admin) reads, bob may not set.
	run(admin, "", "quotas", "set", "--team", "ml", "--location", "us", "--gpus", "4")
	if out := run(alice, "", "quotas", "list"); !strings.Contains(out, "ml    us") || !strings.Contains(out, "4") {
		t.Errorf("quotas list:\n%s", out)
	}
	fails(bob, "only platform admins", "quotas", "set", "--team", "web", "--location", "us", "--gpus", "99")

	// The audit log: alice's team's changes, with her and the admin in it.
	out := run(alice, "", "audit", "-o", "json")
	var log apiv1.AuditList
	if err := json.Unmarshal([]byte(out), &log); err != nil {
		t.Fatalf("audit -o json: %v\n%s", err, out)
	}
	actions := map[string]bool{}
	for _, r := range log.Items {
		if r.Team != "ml" {
			t.Errorf("alice's audit shows team %q: %+v", r.Team, r)
		}
		actions[r.User+" "+r.Action] = true
	}
	for _, want := range []string{"alice createJob", "admin putMember", "admin setQuota", "alice createToken"} {
		if !actions[want] {
			t.Errorf("the audit log has no %q: %v", want, actions)
		}
	}
	fails(bob, "needs a higher role", "audit")
	if out := run(admin, "", "audit", "--all-teams", "--action", "createTeam"); strings.Count(out, "createTeam") != 2 {
		t.Errorf("audit --all-teams --action createTeam:\n%s", out)
	}
}

// loginToken signs in as user through the CLI and returns the token saved.
func loginToken(t *testing.T, admin map[string]string, user, pw string) string {
	t.Helper()
	home := t.TempDir()
	env := map[string]string{envURL: admin[envURL], "HOME": home}
	if code, out, errs := runCLIIn(t, env, pw+"\n", "login", "-u", user, "--password-stdin"); code != 0 {
		t.Fatalf("login %s: %d %s%s", user, code, out, errs)
	}
	c, err := readConfigFile(filepath.Join(home, ".config", "cosmicac", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return c.Token
}
