package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmictest"
)

// TestAPIKeysByNameOnThePlatform: create -q prints the key alone; revoke
// takes a key's name as well as its ID, and refuses a name that two keys
// share (exit 2), listing both, so that a script never revokes the wrong one.
func TestAPIKeysByNameOnThePlatform(t *testing.T) {
	e := cosmictest.NewEnv(t)
	tok, err := e.P.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COSMICAC_URL": e.P.URL, "COSMICAC_TOKEN": tok, "HOME": t.TempDir()}
	list := func() []apiv1.APIKey {
		t.Helper()
		code, out, errs := runCLI(t, env, "api-keys", "list", "-o", "json")
		var l apiv1.APIKeyList
		if code != 0 || json.Unmarshal([]byte(out), &l) != nil {
			t.Fatalf("api-keys list: exit %d %q %q", code, out, errs)
		}
		return l.Items
	}

	code, out, errs := runCLI(t, env, "api-keys", "create", "ci", "-q")
	if key := strings.TrimSuffix(out, "\n"); code != 0 || !strings.HasPrefix(key, "sk-cac-") || strings.ContainsAny(key, " \n") || errs != "" {
		t.Fatalf("create -q: exit %d, stdout %q, stderr %q; want the key alone", code, out, errs)
	}
	if code, _, errs := runCLI(t, env, "api-keys", "create", "ci", "-q", "-o", "json"); code != ExitUsage {
		t.Errorf("create -q -o json: exit %d (%s), want %d", code, errs, ExitUsage)
	}
	if code, _, errs := runCLI(t, env, "api-keys", "create", "ci", "-q"); code != 0 {
		t.Fatalf("second ci: exit %d: %s", code, errs)
	}
	if code, _, errs := runCLI(t, env, "api-keys", "create", "deploy", "--quiet"); code != 0 {
		t.Fatalf("deploy: exit %d: %s", code, errs)
	}
	keys := list()
	if len(keys) != 3 {
		t.Fatalf("keys %+v, want 3", keys)
	}

	// Two keys are named ci: the name is refused, with both IDs.
	code, out, errs = runCLI(t, env, "api-keys", "revoke", "ci")
	if code != ExitUsage || out != "" || !strings.Contains(errs, `2 API keys are named "ci"`) {
		t.Fatalf("revoke ci: exit %d, stdout %q, stderr %q; want exit 2", code, out, errs)
	}
	var ci []string
	for _, k := range keys {
		if k.Name == "ci" {
			ci = append(ci, k.ID)
			if !strings.Contains(errs, k.ID) {
				t.Errorf("refusal does not list %s:\n%s", k.ID, errs)
			}
		}
	}
	if len(list()) != 3 {
		t.Fatal("an ambiguous revoke revoked a key")
	}

	// A unique name, and an ID.
	if code, out, errs := runCLI(t, env, "api-keys", "revoke", "deploy"); code != 0 || !strings.Contains(out, "(deploy) revoked") {
		t.Fatalf("revoke deploy: exit %d %q %q", code, out, errs)
	}
	if code, out, errs := runCLI(t, env, "api-keys", "revoke", ci[0]); code != 0 || !strings.Contains(out, ci[0]) {
		t.Fatalf("revoke %s: exit %d %q %q", ci[0], code, out, errs)
	}
	// Now ci names one key.
	if code, out, errs := runCLI(t, env, "api-keys", "revoke", "ci"); code != 0 || !strings.Contains(out, ci[1]) {
		t.Fatalf("revoke ci, the last: exit %d %q %q", code, out, errs)
	}
	if left := list(); len(left) != 0 {
		t.Errorf("keys left: %+v", left)
	}
	// Neither a name nor an ID: the API's not_found.
	if code, _, errs := runCLI(t, env, "api-keys", "revoke", "nothing"); code != ExitFailure || !strings.Contains(errs, "not_found") {
		t.Errorf("revoke nothing: exit %d %q, want %d and not_found", code, errs, ExitFailure)
	}
}

// TestAPIKeyLimitsAndRotateOnThePlatform: create --model --expires makes a
// limited key that list shows (MODELS, EXPIRES); rotate by name prints the
// new key alone with -q, the list then shows the old secret's grace, and a
// bad --grace or --expires is a usage error.
func TestAPIKeyLimitsAndRotateOnThePlatform(t *testing.T) {
	e := cosmictest.NewEnv(t)
	tok, err := e.P.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COSMICAC_URL": e.P.URL, "COSMICAC_TOKEN": tok, "HOME": t.TempDir()}
	code, out, errs := runCLI(t, env, "api-keys", "create", "bot", "--model", "qwen", "--model", "whisper", "--expires", "720h", "-q")
	first := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(first, "sk-cac-") {
		t.Fatalf("create --model --expires: exit %d %q %q", code, out, errs)
	}
	if code, _, errs := runCLI(t, env, "api-keys", "create", "x", "--expires", "soon"); code != ExitUsage {
		t.Errorf("--expires soon: exit %d (%s), want %d", code, errs, ExitUsage)
	}
	code, out, errs = runCLI(t, env, "api-keys", "list")
	if code != 0 || !strings.Contains(out, "MODELS") || !strings.Contains(out, "qwen,whisper") || !strings.Contains(out, "in 29d") {
		t.Fatalf("list: exit %d\n%s%s", code, out, errs)
	}
	if code, _, errs := runCLI(t, env, "api-keys", "rotate", "bot", "--grace", "a while"); code != ExitUsage {
		t.Errorf("--grace 'a while': exit %d (%s), want %d", code, errs, ExitUsage)
	}
	if code, _, errs := runCLI(t, env, "api-keys", "rotate", "bot", "--grace", "200h"); code != ExitFailure || !strings.Contains(errs, "grace") {
		t.Errorf("--grace 200h: exit %d (%s), want %d naming grace", code, errs, ExitFailure)
	}
	code, out, errs = runCLI(t, env, "api-keys", "rotate", "bot", "--grace", "1h", "-q")
	second := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(second, "sk-cac-") || second == first {
		t.Fatalf("rotate -q: exit %d %q %q; want a new key alone", code, out, errs)
	}
	code, out, errs = runCLI(t, env, "api-keys", "list", "-o", "json")
	var l apiv1.APIKeyList
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || len(l.Items) != 1 {
		t.Fatalf("list -o json: exit %d %q %q", code, out, errs)
	}
	k := l.Items[0]
	if k.RotatedAt.IsZero() || k.PreviousExpiresAt.IsZero() || !strings.HasPrefix(second, k.Prefix) || len(k.Models) != 2 || k.ExpiresAt.IsZero() {
		t.Errorf("after rotate: %+v; want rotatedAt, previousExpiresAt, the new prefix, models and expiry kept", k)
	}
}
