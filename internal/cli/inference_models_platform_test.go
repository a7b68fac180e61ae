package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/cosmictest"
)

// `cosmicac inference models` lists the team's Managed Inference Jobs with
// the login's token, and what the endpoint answers an API key with one.
func TestInferenceModelsOnThePlatform(t *testing.T) {
	e := cosmictest.NewEnv(t)
	j := e.Create(cosmic.Spec{Type: cosmic.TypeManagedInference, Name: "chatbot", Location: "us",
		Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-8B", ServedModelName: "qwen", Replicas: 2, GPUsPerReplica: 1}})
	e.Create(cosmictest.Container("not-a-model", 1))
	e.WaitState(j.ID, cosmic.StateRunning)
	tok, err := e.P.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COSMICAC_URL": e.P.URL, "COSMICAC_TOKEN": tok, "HOME": t.TempDir()}
	code, out, errs := runCLI(t, env, "inference", "models")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("models by token: exit %d, %q %s", code, out, errs)
	}
	// MODEL JOB TEAM STATE HEALTH REPLICAS AUTH ("api key": two fields)
	if f := strings.Fields(lines[1]); len(f) != 8 || strings.Join(f[:4], " ") != "qwen chatbot default running" || strings.Join(f[5:], " ") != "2 api key" {
		t.Fatalf("models by token: row %q", lines[1])
	}
	if !strings.Contains(errs, "endpoint: "+e.P.URL+"/inference/v1") {
		t.Errorf("models by token: stderr %q", errs)
	}
	code, out, errs = runCLI(t, env, "api-keys", "create", "models", "-o", "json")
	var k struct{ Key string }
	if code != 0 || json.Unmarshal([]byte(out), &k) != nil || k.Key == "" {
		t.Fatalf("api-keys create: %d %q %s", code, out, errs)
	}
	env["COSMICAC_API_KEY"] = k.Key
	code, out, errs = runCLI(t, env, "inference", "models", "-o", "json")
	var l struct {
		Items []modelRow `json:"items"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || len(l.Items) != 1 || l.Items[0].Model != "qwen" || l.Items[0].Job != j.ID {
		t.Fatalf("models by key: exit %d, %q %s", code, out, errs)
	}
}
