package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestInferenceWithoutAKeySaysHowToGetOne: a chat (or a model list) that
// sent no API key and is answered 401 says the command that makes a key,
// which a member of the model's team may run; a wrong key gets no such
// hint (issue 32, item 5).
func TestInferenceWithoutAKeySaysHowToGetOne(t *testing.T) {
	mux := http.NewServeMux()
	unauthorized := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":{"message":"missing API key","type":"invalid_request_error","code":"invalid_api_key"}}`)
	}
	mux.HandleFunc("POST /inference/v1/chat/completions", unauthorized)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	env := map[string]string{"COSMICAC_URL": srv.URL, "COSMICAC_TOKEN": "cac_x"}

	code, out, errs := runCLI(t, env, "inference", "chat", "--model", "qwen", "hi")
	if code != ExitFailure || out != "" {
		t.Fatalf("chat without a key: exit %d, stdout %q", code, out)
	}
	for _, want := range []string{"invalid_api_key (401)", "export COSMICAC_API_KEY=$(cosmicac api-keys create my-key -q)", "--api-key KEY"} {
		if !strings.Contains(errs, want) {
			t.Errorf("chat without a key says %q, want %q in it", errs, want)
		}
	}
	env["COSMICAC_API_KEY"] = "sk-cac-wrong"
	if code, _, errs := runCLI(t, env, "inference", "chat", "--model", "qwen", "hi"); code != ExitFailure || strings.Contains(errs, "api-keys create") {
		t.Errorf("chat with a wrong key: exit %d, %q: want the 401 without the hint", code, errs)
	}
}
