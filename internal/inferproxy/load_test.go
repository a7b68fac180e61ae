package inferproxy

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// drainAgents is the keyring's answer with the drains a test sets.
type drainAgents struct {
	Agents
	mu    sync.Mutex
	drain map[int]bool
}

func (d *drainAgents) Draining(job string, replica int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.drain[replica]
}

// inFlight is the load report's count of job at replica.
func inFlight(p *Proxy, job string, replica int) int {
	for _, jl := range p.loadReport().Jobs {
		if jl.ID == job {
			return jl.Replicas[replica]
		}
	}
	return 0
}

// TestDrainingReplicaGetsNoRequests: the load report says what is in
// flight at each replica; a replica the ork drains gets no new request
// (all go to the other), while the one it has goes on to its end, after
// which the report says none is in flight there.
func TestDrainingReplicaGetsNoRequests(t *testing.T) {
	h := newHarness(t, Config{LookupTTL: config.Duration(100 * time.Millisecond)})
	hold := make(chan struct{})
	h.addJob("job-d", "team-a", "d", cosmic.RuntimeVLLM, 2, 1, true, simruntime.Config{Hold: hold})
	h.waitReady("job-d", 2)
	da := &drainAgents{Agents: h.proxy.replicas.agents, drain: map[int]bool{}}
	h.proxy.replicas.agents = da
	chat := func() (string, int) {
		req, _ := http.NewRequest("POST", h.srv.URL+Prefix+"/chat/completions",
			strings.NewReader(`{"model":"d","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":2}`))
		req.Header.Set("Authorization", "Bearer "+h.keys["team-a"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return "", 0
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp.Header.Get("X-CosmicAC-Replica"), resp.StatusCode
	}
	first := make(chan string, 1)
	go func() { r, _ := chat(); first <- r }()
	waittest.Until(t, func() bool { return h.held("job-d") == 1 }, "the first stream held")
	var busy int
	for _, jl := range h.proxy.loadReport().Jobs {
		if jl.ID == "job-d" && jl.InFlight == 1 && len(jl.Replicas) == 1 {
			for r := range jl.Replicas {
				busy = r
			}
		} else if jl.ID == "job-d" {
			t.Fatalf("load report %+v, want one request in flight at one replica", jl)
		}
	}
	da.mu.Lock()
	da.drain[busy] = true
	da.mu.Unlock()
	close(hold)
	for range 10 {
		if r, code := chat(); code != http.StatusOK || r == "" || r == string(rune('0'+busy)) {
			t.Fatalf("a request went to replica %q (%d); replica %d drains", r, code, busy)
		}
	}
	if r := <-first; r != string(rune('0'+busy)) {
		t.Fatalf("the held request was answered by replica %q, want %d", r, busy)
	}
	if n := inFlight(h.proxy, "job-d", busy); n != 0 {
		t.Fatalf("%d in flight at the drained replica after its last request", n)
	}
	if rep := h.proxy.loadReport(); len(rep.Jobs) != 0 {
		t.Fatalf("an idle proxy reports %+v", rep)
	}
}
