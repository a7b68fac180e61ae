package inferproxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/simruntime"
)

// TestWithLoRA: the adapter's "lora" member goes last in the object, so
// that of a key given twice (the caller's own) it is the one that counts.
func TestWithLoRA(t *testing.T) {
	for in, want := range map[string]string{
		`{"model":"m","prompt":"hi"}`:           `{"model":"m","prompt":"hi","lora":[{"id":2,"scale":1}]}`,
		`{}`:                                    `{"lora":[{"id":2,"scale":1}]}`,
		" { } \n":                               ` { "lora":[{"id":2,"scale":1}]} ` + "\n",
		`{"lora":[{"id":0,"scale":1}],"x":{}} `: `{"lora":[{"id":0,"scale":1}],"x":{},"lora":[{"id":2,"scale":1}]} `,
	} {
		if got := string(withLoRA([]byte(in), 2)); got != want {
			t.Errorf("withLoRA(%q) = %q, want %q", in, got, want)
		}
	}
	if got := string(withLoRA([]byte(`{"lora":[{"id":0,"scale":1}]}`), -1)); got != `{"lora":[{"id":0,"scale":1}],"lora":[{"id":0,"scale":0}]}` {
		t.Errorf("the base model's: %q", got)
	}
}

// TestAdapters: a job's LoRA adapters are models of their own to its
// team, NAME:ADAPTER, listed and served; vLLM is asked for the adapter by
// its name (as --lora-modules serves it); an adapter the job does not have
// is not found; audio is refused for an adapter. An open model is called
// by its full name with prefix routing and a long prompt (the body is
// rewritten after the prompt's blocks are read).
func TestAdapters(t *testing.T) {
	h := newHarness(t, Config{})
	no := false
	h.addJobSpec("job-q", "team-a", cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-8B", ServedModelName: "q",
		Adapters: []cosmic.Adapter{{Name: "sql", Source: "acme/sql-lora"}, {Name: "legal", Source: "acme/legal-lora"}}}, 1, 1,
		simruntime.Config{Adapters: []string{"sql", "legal"}})
	h.addJobSpec("job-open", "team-a", cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-8B", ServedModelName: "open",
		RequireAuth: &no, Routing: cosmic.RoutingPrefix}, 1, 1, simruntime.Config{})
	h.waitReady("job-q", 1)
	h.waitReady("job-open", 1)
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, h.srv.URL+Prefix+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+h.keys["team-a"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	_, list := do("GET", "/models", "")
	for _, id := range []string{`"id":"q"`, `"id":"q:sql"`, `"id":"q:legal"`} {
		if !strings.Contains(list, id) {
			t.Errorf("/models lacks %s: %s", id, list)
		}
	}
	code, body := do("POST", "/completions", `{"model":"q:sql","prompt":"SELECT","max_tokens":2}`)
	var out struct{ Model string }
	json.Unmarshal([]byte(body), &out)
	if code != 200 || out.Model != "sql" {
		t.Fatalf("q:sql: %d %s, want 200 from the runtime's adapter sql", code, body)
	}
	if code, body := do("POST", "/completions", `{"model":"q:nope","prompt":"hi"}`); code != 404 || !strings.Contains(body, "model_not_found") {
		t.Fatalf("an adapter the job lacks: %d %s", code, body)
	}
	if code, body := do("GET", "/models/q:legal", ""); code != 200 || !strings.Contains(body, `"q:legal"`) {
		t.Fatalf("GET /models/q:legal: %d %s", code, body)
	}
	if code, _ := do("POST", "/audio/transcriptions", ""); code == 200 {
		t.Fatal("audio for nothing answered 200")
	}
	long := strings.Repeat("a long shared system prompt ", 100)
	for range 2 {
		if code, body := do("POST", "/completions", `{"model":"@team-a/open","prompt":"`+long+`","max_tokens":2}`); code != 200 {
			t.Fatalf("the open model by its full name, prefix routing: %d %s", code, body)
		}
	}
}

// TestSameServing: of the jobs of one name, those that take a request
// rewritten for the first: the same runtime and the same adapters in the
// same order.
func TestSameServing(t *testing.T) {
	a := Model{JobID: "a", Runtime: cosmic.RuntimeLlamaCPP, Adapters: []string{"x", "y"}}
	jobs := []Model{a,
		{JobID: "b", Runtime: cosmic.RuntimeLlamaCPP, Adapters: []string{"y", "x"}},
		{JobID: "c", Runtime: cosmic.RuntimeVLLM, Adapters: []string{"x", "y"}},
		{JobID: "d", Runtime: cosmic.RuntimeLlamaCPP},
		{JobID: "e", Runtime: cosmic.RuntimeLlamaCPP, Adapters: []string{"x", "y"}},
	}
	var got []string
	for _, m := range sameServing(jobs) {
		got = append(got, m.JobID)
	}
	if strings.Join(got, ",") != "a,e" {
		t.Errorf("sameServing: %v, want a,e", got)
	}
	if len(jobs) != 5 || jobs[1].JobID != "b" {
		t.Error("sameServing changed its argument")
	}
}

// TestRuntimeCannotSpeakForTheProxy: what a runtime (a tenant's VM)
// answers cannot set the proxy's rate-limit headers, and a status that is
// no final answer (here 099, which Go's ReadResponse takes) fails the
// replica with a 502 instead of reaching the client.
func TestRuntimeCannotSpeakForTheProxy(t *testing.T) {
	in := benchInference()
	sim := simruntime.Config{Runtime: string(in.Runtime), Model: in.Model, ServedModelName: in.ServedModelName}
	srv := simruntime.New(sim)
	rt := serveRuntime(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/completions" {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(strings.NewReader(string(b)))
			if strings.Contains(string(b), "weird") {
				c, bw, _ := w.(http.Hijacker).Hijack()
				bw.WriteString("HTTP/1.1 099 Weird\r\nContent-Length: 0\r\n\r\n")
				bw.Flush()
				c.Close()
				return
			}
			w.Header().Set("X-Ratelimit-Remaining-Requests", "0")
			w.Header().Set("x-ratelimit-reset-requests", "1h")
		}
		srv.ServeHTTP(w, r)
	}))
	h := newHarness(t, Config{RequestsPerMinute: 100})
	h.launcher = rt
	h.addJobSpec(benchJob, benchTeam, in, 1, 1, sim)
	h.waitReady(benchJob, 1)
	post := func(prompt string) *http.Response {
		req, _ := http.NewRequest("POST", h.srv.URL+Prefix+"/completions", strings.NewReader(`{"model":"`+benchModel+`","prompt":"`+prompt+`","max_tokens":2}`))
		req.Header.Set("Authorization", "Bearer "+h.keys[benchTeam])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	resp := post("hi")
	if resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Remaining-Requests") == "0" || resp.Header.Get("X-Ratelimit-Reset-Requests") == "1h" ||
		resp.Header.Get("X-Ratelimit-Limit-Requests") != "100" {
		t.Fatalf("%d, rate-limit headers %v", resp.StatusCode, resp.Header)
	}
	if resp := post("weird"); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("a runtime's status 099: %d, want 502", resp.StatusCode)
	}
}
