package inferproxy

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
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
	p := New(Config{ReadyWait: -1}, nil, nil, StaticCatalog{ // no replicas: a reached request is 503 at once
		{Name: "qwen", JobID: "job-q", Team: "team-a", RequireAuth: true, Runtime: cosmic.RuntimeVLLM, ModelID: "Qwen/Qwen3-8B"},
		{Name: "open", JobID: "job-o", Team: "team-b", RequireAuth: false, Runtime: cosmic.RuntimeVLLM, ModelID: "meta/llama"},
	}, keys, nil, nil)
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
		{http.MethodGet, Prefix + "/models/M", ""},
		{http.MethodPost, Prefix + "/audio/transcriptions", "multipart"},
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
