package inferproxy

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/inferproxy/keyapi"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/store"
)

// TestInferenceAccessMatrix: every /inference/v1 route with every kind of
// credential, on a model that requires a key and on one that does not:
// a key of the model's team reaches it by its bare name (unless the key is
// limited to other models), another team's key is answered as if the model
// did not exist, a user's API token or an expired or unknown key is 401,
// and no key reaches only a model whose requireAuth is off, by its full
// name @TEAM/NAME, to call it, not to read the model list
// (docs/permissions.md, "Beyond /api/v1"). Each caller also tries the
// other form of each name: a bare name reaches only its own team's model.
func TestInferenceAccessMatrix(t *testing.T) {
	keys := &memKeys{}
	p := mustNew(t, Config{ReadyWait: -1}, Deps{Catalog: StaticCatalog{ // no replicas: a reached request is 503 at once
		{Name: "qwen", JobID: "job-q", Team: "team-a", RequireAuth: true, Runtime: cosmic.RuntimeVLLM, ModelID: "Qwen/Qwen3-8B"},
		{Name: "open", JobID: "job-o", Team: "team-b", RequireAuth: false, Runtime: cosmic.RuntimeVLLM, ModelID: "meta/llama"},
	}, Keys: keys})
	_, own := keys.newKey(t, nil)
	_, other := keys.newKey(t, func(k *store.APIKey) { k.Team = "team-b" })
	_, limited := keys.newKey(t, func(k *store.APIKey) { k.Models = []string{"@team-b/open"} })
	_, expired := keys.newKey(t, func(k *store.APIKey) { k.ExpiresAt = time.Now().Add(-time.Minute) })
	_, revoked := keys.newKey(t, nil)
	for id, k := range keys.keys {
		if k.ID != "" && strings.HasPrefix(revoked, k.Prefix) {
			keys.delete(id)
		}
	}
	type cred struct {
		name, secret string
		valid        bool   // a key that works
		team         string // its team
		models       []string
	}
	creds := []cred{
		{name: "no key"},
		{name: "own team's key", secret: own, valid: true, team: "team-a"},
		{name: "another team's key", secret: other, valid: true, team: "team-b"},
		{name: "key limited to another model", secret: limited, valid: true, team: "team-a", models: []string{"@team-b/open"}},
		{name: "expired key", secret: expired},
		{name: "revoked key", secret: revoked},
		{name: "a user's API token", secret: "cac_" + strings.Repeat("A", 43)},
	}
	models := map[string]struct {
		team        string
		requireAuth bool
	}{"qwen": {"team-a", true}, "open": {"team-b", false}}
	// nameFor is the name c calls model m by: its bare name in its own
	// team, else its full name; other is the other form.
	nameFor := func(c cred, m string) (name, other string) {
		if c.valid && c.team == models[m].team {
			return m, "@" + models[m].team + "/" + m
		}
		return "@" + models[m].team + "/" + m, m
	}
	// reaches says whether c may use model m by its name.
	reaches := func(c cred, m string) bool {
		md := models[m]
		if name, _ := nameFor(c, m); c.valid && len(c.models) > 0 && !slices.Contains(c.models, name) {
			return false
		}
		return !md.requireAuth || c.valid && c.team == md.team
	}
	routes := []struct{ method, path, body string }{
		{http.MethodPost, Prefix + "/chat/completions", `{"model":"M","messages":[{"role":"user","content":"hi"}]}`},
		{http.MethodPost, Prefix + "/completions", `{"model":"M","prompt":"hi"}`},
		{http.MethodPost, Prefix + "/embeddings", `{"model":"M","input":"hi"}`},
		{http.MethodPost, Prefix + "/responses", `{"model":"M","input":"hi"}`},
		{http.MethodGet, Prefix + "/models/M", ""},
		{http.MethodPost, Prefix + "/audio/transcriptions", "multipart"},
		{http.MethodPost, Prefix + "/audio/translations", "multipart"},
	}
	for _, c := range creds {
		for _, rt := range routes {
			for m := range models {
				name, other := nameFor(c, m)
				for _, asked := range []string{name, other} {
					r := httptest.NewRequest(rt.method, strings.ReplaceAll(rt.path, "M", asked), strings.NewReader(strings.ReplaceAll(rt.body, `"M"`, `"`+asked+`"`)))
					if rt.body == "multipart" {
						var b bytes.Buffer
						mw := multipart.NewWriter(&b)
						mw.WriteField("model", asked) //nolint:errcheck // a buffer
						fw, _ := mw.CreateFormFile("file", "a.wav")
						fw.Write([]byte("RIFF")) //nolint:errcheck // a buffer
						mw.Close()
						r = httptest.NewRequest(rt.method, rt.path, &b)
						r.Header.Set("Content-Type", mw.FormDataContentType())
					}
					if c.secret != "" {
						r.Header.Set("Authorization", "Bearer "+c.secret)
					}
					w := httptest.NewRecorder()
					p.Handler().ServeHTTP(w, r)
					want := 0 // reached: anything but 401, 403, 404
					switch {
					case rt.method == http.MethodGet && !c.valid:
						want = http.StatusUnauthorized // reading the models takes a key
					case c.secret != "" && !c.valid:
						want = http.StatusUnauthorized
					case !reaches(c, m) && !c.valid:
						want = http.StatusUnauthorized
					case !reaches(c, m):
						want = http.StatusNotFound
					case asked == other && c.valid && c.team == models[m].team && len(c.models) == 0:
						// Its own model by its full name: the same model.
					case asked == other && !c.valid:
						want = http.StatusUnauthorized
					case asked == other:
						want = http.StatusNotFound
					}
					got := w.Code
					if want == 0 && (got == 401 || got == 403 || got == 404) || want != 0 && got != want {
						t.Errorf("%s, %s %s (%s as %s): %d, want %s: %s", c.name, rt.method, rt.path, m, asked, got, wantText(want), w.Body)
					}
				}
			}
		}
		// The model list needs a key, and shows what the key reaches.
		r := httptest.NewRequest(http.MethodGet, Prefix+"/models", nil)
		if c.secret != "" {
			r.Header.Set("Authorization", "Bearer "+c.secret)
		}
		w := httptest.NewRecorder()
		p.Handler().ServeHTTP(w, r)
		if !c.valid {
			if w.Code != http.StatusUnauthorized {
				t.Errorf("%s, GET /models: %d, want 401", c.name, w.Code)
			}
			continue
		}
		var out struct {
			Data []modelObject `json:"data"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || w.Code != 200 {
			t.Fatalf("%s, GET /models: %d %s", c.name, w.Code, w.Body)
		}
		var got, want []string
		for _, m := range out.Data {
			got = append(got, m.ID)
		}
		for m := range models {
			if reaches(c, m) {
				name, _ := nameFor(c, m)
				want = append(want, name)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s, GET /models lists %v, want %v", c.name, got, want)
		}
	}
}

func wantText(code int) string {
	if code == 0 {
		return "it reached"
	}
	return http.StatusText(code)
}

// TestModelNamesCannotBeSquatted replays the squatting found in the
// probe: team-b serves an open model under the name team-a's own model
// has, and team-a's model is down (stopped), or gone. Each of team-a's
// requests, sent with its own key and the bare name, used to reach
// team-b's VM. Now a bare name reaches only the caller's own team: team-a
// is told its model is not serving (or does not exist), a caller without
// a key must name the open model in full, and the full name @team-b/qwen
// reaches team-b's model, rewritten to the name its runtime serves.
func TestModelNamesCannotBeSquatted(t *testing.T) {
	h := newHarness(t, Config{ReadyWait: -1})
	h.addJob("job-squat", "team-b", "qwen", cosmic.RuntimeVLLM, 1, 1, false, simruntime.Config{})
	h.waitReady("job-squat", 1)
	post := func(key, model string) (int, string) {
		req, _ := http.NewRequest("POST", h.srv.URL+Prefix+"/chat/completions",
			strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"my secret prompt"}],"max_tokens":2}`))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// team-a's own model of that name is gone: 404, ten times of ten.
	for i := range 10 {
		if code, body := post(h.keys["team-a"], "qwen"); code != http.StatusNotFound {
			t.Fatalf("team-a's prompt %d without a model of its own: %d %s, want 404", i, code, body)
		}
	}
	// Stopped: 503 naming team-a's own model and job.
	h.mu.Lock()
	h.models = append(h.models, Model{Name: "qwen", JobID: "job-own", Team: "team-a", RequireAuth: true, Runtime: cosmic.RuntimeVLLM,
		ModelID: "Qwen/Qwen3-8B", Created: time.Now(), State: cosmic.StateStopped})
	h.mu.Unlock()
	for i := range 10 {
		code, body := post(h.keys["team-a"], "qwen")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "model_not_serving") || !strings.Contains(body, "job-own") {
			t.Fatalf("team-a's prompt %d with its model stopped: %d %s, want 503 model_not_serving naming job-own", i, code, body)
		}
	}
	// An adapter of it (NAME:ADAPTER) is not serving either.
	if code, body := post(h.keys["team-a"], "qwen:sql"); code != http.StatusServiceUnavailable || !strings.Contains(body, "job-own") {
		t.Fatalf("an adapter of team-a's stopped model: %d %s, want 503 model_not_serving naming job-own", code, body)
	}
	// Without a key a bare name reaches nobody's model.
	if code, body := post("", "qwen"); code != http.StatusUnauthorized {
		t.Errorf("no key, bare name: %d %s, want 401", code, body)
	}
	// The full name reaches the open model, with or without a key.
	for _, key := range []string{"", h.keys["team-a"], h.keys["team-b"]} {
		if code, body := post(key, "@team-b/qwen"); code != http.StatusOK || !strings.Contains(body, `"model":"qwen"`) {
			t.Errorf("@team-b/qwen with key %.12q: %d %s, want 200 from the runtime serving qwen", key, code, body)
		}
	}
	// Nor can a full name reach a model that needs a key of its team.
	if code, body := post(h.keys["team-b"], "@team-a/qwen"); code != http.StatusNotFound {
		t.Errorf("team-b's key, @team-a/qwen: %d %s, want 404", code, body)
	}
}

// countingReader is a body of size bytes, prefix then spaces, that counts
// the bytes read of it.
type countingReader struct {
	prefix  string
	n, size int
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.n >= c.size {
		return 0, io.EOF
	}
	k := min(len(p), c.size-c.n)
	for i := range p[:k] {
		p[i] = ' '
		if c.n+i < len(c.prefix) {
			p[i] = c.prefix[c.n+i]
		}
	}
	c.n += k
	return k, nil
}

// TestBodiesReadAfterTheChecks: a caller's key and limits are checked
// before any byte of its body is read, and a caller without a key may send
// a small body only: a wrong key, or a client over its limits, costs the
// proxy no read, and an anonymous 16 MiB body is cut at the anonymous
// bound, on the JSON routes and on audio uploads alike.
func TestBodiesReadAfterTheChecks(t *testing.T) {
	p := mustNew(t, Config{ReadyWait: -1, RequestsPerMinute: 1}, Deps{Catalog: StaticCatalog{
		{Name: "open", JobID: "job-o", Team: "team-b", RequireAuth: false, Runtime: cosmic.RuntimeVLLM, ModelID: "meta/llama"},
	}, Keys: &memKeys{}})
	def := DefaultConfig()
	send := func(path, key, addr string, size int) (int, int) {
		body := &countingReader{size: size}
		if strings.HasPrefix(path, "/audio/") {
			body.prefix = "--x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n"
		}
		r := httptest.NewRequest(http.MethodPost, Prefix+path, body)
		r.ContentLength = -1 // as a chunked upload: no early 413 from the length
		r.RemoteAddr = addr
		if strings.HasPrefix(path, "/audio/") {
			r.Header.Set("Content-Type", "multipart/form-data; boundary=x")
		}
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		w := httptest.NewRecorder()
		p.Handler().ServeHTTP(w, r)
		return w.Code, body.n
	}
	paths := []string{"/chat/completions", "/responses", "/audio/transcriptions", "/audio/translations"}
	for _, path := range paths {
		if code, n := send(path, keyapi.KeyPrefix+"wrong", "198.18.0.1:1000", 16<<20); code != http.StatusUnauthorized || n != 0 {
			t.Errorf("%s with a wrong key: %d after reading %d bytes, want 401 after none", path, code, n)
		}
	}
	bound := map[string]int64{"/chat/completions": def.MaxAnonymousBodyBytes, "/responses": def.MaxAnonymousBodyBytes,
		"/audio/transcriptions": def.MaxAnonymousAudioBytes, "/audio/translations": def.MaxAnonymousAudioBytes}
	for i, path := range paths {
		addr := "198.18.0." + string(rune('2'+i)) + ":1000"
		code, n := send(path, "", addr, 16<<20)
		if code != http.StatusRequestEntityTooLarge || int64(n) > bound[path]+64<<10 {
			t.Errorf("%s, 16 MiB without a key: %d after reading %d bytes, want 413 after at most %d", path, code, n, bound[path])
		}
		// The client's one request a minute is spent: the next reads nothing.
		if code, n := send(path, "", addr, 16<<20); code != http.StatusTooManyRequests || n != 0 {
			t.Errorf("%s over the client's limit: %d after reading %d bytes, want 429 after none", path, code, n)
		}
	}
}
