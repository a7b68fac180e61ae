package monitor_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/monitor"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

func node(t *testing.T, name string, policy fabric.Policy) *fabric.Node {
	t.Helper()
	id, err := fabric.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	listen := "127.0.0.1:0"
	if policy == nil {
		listen = ""
	}
	n, err := fabric.New(fabric.Config{Component: name, Identity: id, Listen: listen, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// A worker's records reach a viewer over the fabric: every setup step up
// to a failure, in order.
func TestForwarderOverFabricToViewer(t *testing.T) {
	e := start(t, monitor.DefaultConfig(""), false)
	allow := fabric.NewAllowList()
	mon := node(t, "wrk-monitor", allow)
	e.m.Serve(mon, nil)
	wrk := node(t, "wrk-server-sim", nil)
	allow.Allow(wrk.PublicKey())
	wrk.AddAddrs(mon.PublicKey(), mon.Addr())

	fwd := joblog.NewForwarder(wrk, mon.PublicKey(), 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go fwd.Run(ctx)
	steps := []string{"schedule", "import_disk", "boot"}
	for i, s := range steps {
		fwd.Emit(joblog.Record{Time: time.Now(), JobID: jobA, Source: joblog.SourceSystem, Stream: "sim-r1", Step: s, OK: joblog.Bool(i < 2), Line: s})
	}
	if err := fwd.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs, _, err := collect(ctx, e.c, client.LogOptions{Source: joblog.SourceSystem}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[0].Step != "schedule" || recs[2].Step != "boot" || *recs[2].OK {
		t.Fatalf("records %+v", recs)
	}
	// A bad record is refused as such.
	err = wrk.Call(ctx, mon.PublicKey(), joblog.Append.Name, joblog.AppendParams{Records: []joblog.Record{{JobID: jobA, Source: "nope"}}}, nil)
	if fabric.ErrorCode(err) != fabric.CodeBadRequest {
		t.Fatalf("bad record: %v", err)
	}
}

func TestAPIAuthorizer(t *testing.T) {
	// The app-node's answers: token "good" sees jobA; others are refused.
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") != "Bearer good" && r.Header.Get("Authorization") != "Bearer other":
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":{"code":"unauthorized","message":"missing or invalid token"}}`))
		case r.Header.Get("Authorization") == "Bearer other" || !strings.HasSuffix(r.URL.Path, "/jobs/"+jobA):
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":{"code":"not_found","message":"no such job"}}`))
		default:
			w.Write([]byte(`{"id":"` + jobA + `"}`))
		}
	})
	m, err := monitor.New(monitor.DefaultConfig(""), monitor.Deps{Viewers: monitor.NewAPIAuthorizer("http://app-node", monitor.HandlerTransport(api))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"bad token", "bad", http.StatusUnauthorized},
		{"job of another team", "other", http.StatusNotFound},
		{"visible job", "good", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := collect(context.Background(), client.New(srv.URL, tc.token), client.LogOptions{}, 0)
			if got := client.StatusOf(err); (tc.want == http.StatusOK && err != nil) || (tc.want != http.StatusOK && got != tc.want) {
				t.Fatalf("got %v, want %d", err, tc.want)
			}
		})
	}
}

// Each producer writes only what is its own: a rack's worker the records
// of the jobs on its rack (after one more look at the ork's list), an
// agent only its own job's, under its binding's team and replica, with its
// system lines marked as its own.
func TestAppendIsConfined(t *testing.T) {
	e := start(t, monitor.DefaultConfig(""), false)
	ring := trust.NewKeyring()
	mon := node(t, "wrk-monitor", trust.NewPolicy(trust.Monitor, ring))
	src := &lateOrk{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go ring.Follow(ctx, src, nil)
	e.m.Serve(mon, ring)
	wA, wB, agent, orkN := node(t, "worker-a", nil), node(t, "worker-b", nil), node(t, "agent", nil), node(t, "wrk-ork", nil)
	for _, n := range []*fabric.Node{wA, wB, agent, orkN} {
		n.AddAddrs(mon.PublicKey(), mon.Addr())
	}
	if err := ring.Add(trust.Ork, orkN.PublicKey()); err != nil {
		t.Fatal(err)
	}
	const jobB = "00000000-0000-4000-8000-00000000000b"
	src.set(orkapi.Peers{Epoch: "e", Version: 1,
		Racks:      []orkapi.RackPeer{{Rack: "a", WorkerKey: wA.PublicKey().String()}, {Rack: "b", WorkerKey: wB.PublicKey().String()}},
		Placements: []orkapi.Placement{{Job: jobA, Team: "t1", Type: cosmic.TypeGPUContainer, Replica: 1, Rack: "a", AgentKeys: []string{agent.PublicKey().String()}}}}, false)
	<-ring.Synced()
	waittest.Until(t, func() bool { return ring.OnRack(jobA, "a") }, "the keyring to place %s on rack a", jobA)
	appendAs := func(n *fabric.Node, recs ...joblog.Record) joblog.AppendReply {
		t.Helper()
		var rep joblog.AppendReply
		if err := n.Call(ctx, mon.PublicKey(), joblog.Append.Name, joblog.AppendParams{Records: recs}, &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	rec := func(job, source, stream, line string) joblog.Record {
		return joblog.Record{Time: time.Now(), JobID: job, Team: "forged", Replica: 7, Source: source, Stream: stream, Line: line}
	}
	if rep := appendAs(wB, rec(jobA, joblog.SourceSystem, "wrk-server-sim", "forged by rack b")); rep.Accepted != 0 || rep.Refused != 1 {
		t.Fatalf("another rack's worker: %+v", rep)
	}
	if rep := appendAs(agent, rec(jobB, joblog.SourceApplication, "stdout", "into another job"), rec(jobA, joblog.SourceSystem, "wrk-server-sim", "claims to be the worker")); rep.Accepted != 1 || rep.Refused != 1 {
		t.Fatalf("the agent: %+v", rep)
	}
	// The ork places jobB on rack b only now: the worker's first record
	// of it makes the monitor look again.
	src.set(orkapi.Peers{Epoch: "e", Version: 2, Racks: []orkapi.RackPeer{{Rack: "a", WorkerKey: wA.PublicKey().String()}, {Rack: "b", WorkerKey: wB.PublicKey().String()}},
		Placements: []orkapi.Placement{{Job: jobB, Team: "t2", Type: cosmic.TypeGPUContainer, Rack: "b"}}}, true)
	if rep := appendAs(wB, rec(jobB, joblog.SourceSystem, "wrk-server-sim", "placed a moment ago")); rep.Accepted != 1 {
		t.Fatalf("a job the worker's rack just took: %+v", rep)
	}
	if rep := appendAs(wA, rec(jobA, joblog.SourceSystem, "wrk-server-sim", "vmi deleted")); rep.Accepted != 1 {
		t.Fatalf("a job that just left the worker's rack: %+v", rep)
	}
	// The ork writes its decisions about any job, as system records
	// under its own name whatever it says.
	if rep := appendAs(orkN, rec(jobA, joblog.SourceApplication, "stdout", "scaled up")); rep.Accepted != 1 {
		t.Fatalf("the ork: %+v", rep)
	}
	recs, _, err := collect(ctx, e.c, client.LogOptions{}, 3)
	if err != nil {
		t.Fatal(err)
	}
	got := recs[0]
	if got.Line != "claims to be the worker" || got.Team != "t1" || got.Replica != 1 || got.Stream != string(trust.InstanceAgent) {
		t.Fatalf("the agent's record was kept as %+v", got)
	}
	if got := recs[len(recs)-1]; got.Line != "scaled up" || got.Source != joblog.SourceSystem || got.Stream != string(trust.Ork) {
		t.Fatalf("the ork's record was kept as %+v", got)
	}
}

// lateOrk answers watchPeers from what it was last set to; a quiet set
// wakes no long poll (only a Sync sees it), as when the long poll's answer
// is still on its way.
type lateOrk struct {
	mu      sync.Mutex
	peers   orkapi.Peers
	changed chan struct{}
}

func (o *lateOrk) set(p orkapi.Peers, quiet bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.peers = p
	if o.changed == nil {
		o.changed = make(chan struct{})
	}
	if !quiet {
		close(o.changed)
		o.changed = make(chan struct{})
	}
}

func (o *lateOrk) WatchPeers(ctx context.Context, p orkapi.WatchPeersParams) (orkapi.Peers, error) {
	o.mu.Lock()
	if o.changed == nil {
		o.changed = make(chan struct{})
	}
	cur, ch := o.peers, o.changed
	o.mu.Unlock()
	if p.WaitMillis == 0 || p.Epoch != cur.Epoch || p.Since < cur.Version {
		return cur, nil
	}
	select {
	case <-ch:
	case <-ctx.Done():
		return orkapi.Peers{}, ctx.Err()
	}
	return o.WatchPeers(ctx, orkapi.WatchPeersParams{})
}
