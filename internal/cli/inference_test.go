package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
)

// TestInferenceAndAPIKeyCommands runs the inference and api-keys commands
// against a fake of the routes they call.
func TestInferenceAndAPIKeyCommands(t *testing.T) {
	var gotAuth []string
	mux := http.NewServeMux()
	mux.HandleFunc("POST /inference/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		gotAuth = append(gotAuth, r.Header.Get("Authorization"))
		var req struct {
			Model  string
			Stream bool
		}
		json.NewDecoder(r.Body).Decode(&req)
		if req.Model != "qwen" {
			w.WriteHeader(404)
			io.WriteString(w, `{"error":{"message":"The model does not exist","type":"invalid_request_error","code":"model_not_found"}}`)
			return
		}
		if !req.Stream {
			io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"hello there"}}]}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, tok := range []string{"hel", "lo"} {
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%q}}]}\n\n", tok)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	mux.HandleFunc("POST /inference/v1/audio/transcriptions", func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("model") != "nvidia/parakeet-tdt-0.6b-v3" {
			w.WriteHeader(400)
			return
		}
		f, _, _ := r.FormFile("file")
		b, _ := io.ReadAll(f)
		fmt.Fprintf(w, `{"text":"%d bytes heard"}`, len(b))
	})
	mux.HandleFunc("POST /api/v1/api-keys", func(w http.ResponseWriter, r *http.Request) {
		var req apiv1.CreateAPIKey
		json.NewDecoder(r.Body).Decode(&req)
		w.WriteHeader(201)
		json.NewEncoder(w).Encode(apiv1.CreatedAPIKey{APIKey: apiv1.APIKey{ID: "key_1", Name: req.Name, Team: "default", Prefix: "sk-cac-abcd", CreatedAt: time.Now()}, Key: "sk-cac-secret"})
	})
	mux.HandleFunc("GET /api/v1/api-keys", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(apiv1.APIKeyList{Items: []apiv1.APIKey{{ID: "key_1", Name: "ci", Team: "default", Prefix: "sk-cac-abcd"}}, Total: 1})
	})
	mux.HandleFunc("DELETE /api/v1/api-keys/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "key_1" {
			w.WriteHeader(404)
			io.WriteString(w, `{"error":{"code":"not_found","message":"no such key"}}`)
			return
		}
		w.WriteHeader(204)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	env := map[string]string{"COSMICAC_URL": srv.URL, "COSMICAC_TOKEN": "cac_x", "COSMICAC_API_KEY": "sk-cac-k"}

	if code, out, errs := runCLI(t, env, "inference", "chat", "--model", "qwen", "hi"); code != 0 || out != "hello there\n" {
		t.Fatalf("chat: %d %q %q", code, out, errs)
	}
	if code, out, errs := runCLI(t, env, "inference", "chat", "--model", "qwen", "--stream", "--api-key", "sk-cac-other", "hi"); code != 0 || out != "hello\n" {
		t.Fatalf("chat --stream: %d %q %q", code, out, errs)
	}
	if strings.Join(gotAuth, ",") != "Bearer sk-cac-k,Bearer sk-cac-other" {
		t.Fatalf("auth headers %v", gotAuth)
	}
	if code, _, errs := runCLI(t, env, "inference", "chat", "--model", "nope", "hi"); code != 1 || !strings.Contains(errs, "model_not_found (404)") {
		t.Fatalf("unknown model: %d %q", code, errs)
	}
	wav := t.TempDir() + "/a.wav"
	if err := os.WriteFile(wav, []byte("RIFF....WAVE"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runCLI(t, env, "inference", "transcribe", "--model", "nvidia/parakeet-tdt-0.6b-v3", wav); code != 0 || out != "12 bytes heard\n" {
		t.Fatalf("transcribe: %d %q %q", code, out, errs)
	}
	code, out, errs := runCLI(t, env, "api-keys", "create", "ci", "-o", "json")
	var created map[string]string
	if code != 0 || json.Unmarshal([]byte(out), &created) != nil || created["key"] != "sk-cac-secret" || created["id"] != "key_1" || created["name"] != "ci" || len(created) != 3 {
		t.Fatalf("create: %d %q %q", code, out, errs)
	}
	if code, out, _ := runCLI(t, env, "api-keys", "list"); code != 0 || !strings.Contains(out, "key_1") || strings.Contains(out, "secret") {
		t.Fatalf("list: %d %q", code, out)
	}
	if code, out, _ := runCLI(t, env, "api-keys", "revoke", "key_1"); code != 0 || !strings.Contains(out, "revoked") {
		t.Fatalf("revoke: %d %q", code, out)
	}
	if code, _, _ := runCLI(t, env, "api-keys", "revoke", "key_2"); code != 1 {
		t.Fatalf("revoke unknown: %d", code)
	}
}
