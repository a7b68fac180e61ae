package inferproxy

import (
	"bytes"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"

	"github.com/cosmicac/cosmicac/internal/simruntime"
)

// TestRuntimeGetsNoCredentialsNorHopHeaders sends a request through the
// proxy, the fabric and the agent to a runtime that records what reached
// it: the caller's key stays at the proxy, and so do the hop-by-hop headers
// and those any of the request's Connection lines names; the client gets
// the runtime's end-to-end headers, not the hop-by-hop ones it named. No
// platform credential reaches the runtime (a browser's session cookie and
// CSRF token, as the web interface's playground once sent them), and the
// runtime sets no cookie on the platform's origin (a session fixed).
func TestRuntimeGetsNoCredentialsNorHopHeaders(t *testing.T) {
	in := benchInference()
	sim := simruntime.Config{Runtime: string(in.Runtime), Model: in.Model, ServedModelName: in.ServedModelName}
	srv := simruntime.New(sim)
	var mu sync.Mutex
	var got []http.Header
	rt := serveRuntime(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			mu.Lock()
			got = append(got, r.Header.Clone())
			mu.Unlock()
			w.Header().Set("Connection", "X-Runtime-Private")
			w.Header().Set("X-Runtime-Private", "1")
			w.Header().Set("X-Runtime-Public", "1")
			w.Header().Add("Set-Cookie", apiv1.SessionCookie+"=cas_fixed; Path=/")
			w.Header().Add("Set-Cookie", "other=1; Path=/")
		}
		srv.ServeHTTP(w, r)
	}))

	h := newHarness(t, Config{})
	h.launcher = rt
	h.addJobSpec(benchJob, benchTeam, in, 1, 1, sim)
	h.waitReady(benchJob, 1)

	body := []byte(`{"model":"` + benchModel + `","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
	req, _ := http.NewRequest("POST", h.srv.URL+Prefix+"/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.keys[benchTeam])
	req.Header["Connection"] = []string{"keep-alive, x-one", "X-TWO"}
	for _, k := range []string{"X-One", "X-Two", "Proxy-Authorization", "Keep-Alive", "Te", "X-Kept"} {
		req.Header.Set(k, "v")
	}
	req.Header.Set(apiv1.HeaderCSRF, "csrf_secret")
	req.Header.Set(apiv1.HeaderAPIKey, h.keys[benchTeam])
	req.Header.Add("Cookie", apiv1.SessionCookie+"=cas_secret; theme=dark")
	req.Header.Add("Cookie", "COSMICAC_SESSION=cas_secret2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %s", resp.Status)
	}
	if resp.Header.Get("X-Runtime-Public") != "1" || resp.Header.Get("X-Runtime-Private") != "" || resp.Header.Get("X-Cosmicac-Replica") == "" {
		t.Errorf("client got %v: want X-Runtime-Public and X-CosmicAC-Replica, not X-Runtime-Private", resp.Header)
	}
	if v := resp.Header.Values("Set-Cookie"); len(v) > 0 {
		t.Errorf("client got Set-Cookie %q from the runtime", v)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("the runtime got %d requests, want 1", len(got))
	}
	rh := got[0]
	for _, k := range []string{"Authorization", "X-Api-Key", "X-One", "X-Two", "Proxy-Authorization", "Keep-Alive", "Te", "Cookie", "X-Csrf-Token"} {
		if v, ok := rh[k]; ok {
			t.Errorf("the runtime got %s: %q", k, v)
		}
	}
	if rh.Get("X-Kept") != "v" || rh.Get("Content-Type") != "application/json" {
		t.Errorf("the runtime got %v: want X-Kept and Content-Type", rh)
	}
}
