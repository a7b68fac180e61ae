package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/cosmictest"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// TestInferenceCommandsOnThePlatform runs `cosmicac api-keys` and
// `cosmicac inference chat` against a whole platform (the simulated rack,
// the app-node, proxy-inference and the inference agents in-process).
func TestInferenceCommandsOnThePlatform(t *testing.T) {
	e := cosmictest.NewEnv(t)
	j := e.Create(cosmic.Spec{Type: cosmic.TypeManagedInference, Name: "qwen", Location: "us",
		Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-8B", ServedModelName: "qwen", Replicas: 1, GPUsPerReplica: 1}})
	e.WaitState(j.ID, cosmic.StateRunning)
	tok, err := e.P.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COSMICAC_URL": e.P.URL, "COSMICAC_TOKEN": tok, "HOME": t.TempDir()}
	code, out, errs := runCLI(t, env, "api-keys", "create", "cli", "-o", "json")
	var k struct{ ID, Name, Key string }
	if code != 0 || json.Unmarshal([]byte(out), &k) != nil || !strings.HasPrefix(k.Key, "sk-cac-") {
		t.Fatalf("api-keys create: %d %q %q", code, out, errs)
	}
	env["COSMICAC_API_KEY"] = k.Key
	waittest.NoError(t, func() error {
		if mh, err := e.P.Proxy.JobHealth(e.Ctx, j.ID); err != nil || len(mh.Replicas) != 1 || !mh.Replicas[0].Ready {
			return fmt.Errorf("health %+v, %v", mh, err)
		}
		return nil
	}, "the proxy to serve the job's one replica")
	code, plain, errs := runCLI(t, env, "inference", "chat", "--model", "qwen", "hello there")
	if code != 0 || strings.TrimSpace(plain) == "" {
		t.Fatalf("chat: %d %q %q", code, plain, errs)
	}
	code, streamed, errs := runCLI(t, env, "inference", "chat", "--model", "qwen", "--stream", "hello there")
	if code != 0 || streamed != plain {
		t.Fatalf("chat --stream: %d %q (plain %q) %q", code, streamed, plain, errs)
	}
	if code, out, errs := runCLI(t, env, "api-keys", "list"); code != 0 || !strings.Contains(out, k.ID) {
		t.Fatalf("api-keys list: %d %q %q", code, out, errs)
	}
	if code, out, errs := runCLI(t, env, "api-keys", "revoke", k.ID); code != 0 {
		t.Fatalf("api-keys revoke: %d %q %q", code, out, errs)
	}
	if code, out, _ := runCLI(t, env, "api-keys", "list", "-o", "json"); code != 0 || strings.Contains(out, k.ID) {
		t.Fatalf("api-keys list after revoke: %d %q", code, out)
	}
}
