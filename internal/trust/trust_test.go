package trust

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/datasync/dataapi"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

func key(t *testing.T) fabric.PublicKey {
	t.Helper()
	id, err := fabric.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	return id.PublicKey()
}

// The declaration is well formed: every role it names exists, each server
// is declared once with no method twice, and every server has a caller for
// each method (or only operators, said in its doc).
func TestGraphIsWellFormed(t *testing.T) {
	servers := map[Role]bool{}
	for _, s := range Graph {
		if !slices.Contains(Roles, s.Role) {
			t.Errorf("server %q is not a role", s.Role)
		}
		if servers[s.Role] {
			t.Errorf("server %s declared twice", s.Role)
		}
		servers[s.Role] = true
		names := map[string]bool{}
		for _, m := range s.Methods {
			if names[m.Name] || m.Name == MethodPing {
				t.Errorf("%s: method %s declared twice (or ping declared)", s.Role, m.Name)
			}
			names[m.Name] = true
			if m.Kind != Call && m.Kind != Event && m.Kind != Stream {
				t.Errorf("%s.%s: kind %q", s.Role, m.Name, m.Kind)
			}
			for _, c := range m.Callers {
				if !slices.Contains(Roles, c) || c == Operator {
					t.Errorf("%s.%s: caller %q (operators call everything already)", s.Role, m.Name, c)
				}
				if c.Bound() && m.Confined == "" {
					t.Errorf("%s.%s: callable by bound %s keys but says nothing of how they are confined", s.Role, m.Name, c)
				}
			}
		}
	}
	for _, r := range Roles {
		if r != Operator && !servers[r] {
			t.Errorf("role %s has no server declaration", r)
		}
	}
}

// Who admits whom follows from the methods, both ways.
func TestAdmittedBy(t *testing.T) {
	for server, want := range map[Role][]Role{
		Ork:            {Operator, AppNode, Monitor, Directory, Proxy, Worker},
		AppNode:        {Operator, Ork, Directory, Proxy, InstanceAgent, InferenceAgent},
		Monitor:        {Operator, Ork, Worker, InstanceAgent, InferenceAgent},
		Directory:      {Operator, Ork, AppNode, Proxy, InstanceAgent, InferenceAgent},
		Proxy:          {Operator, Ork, AppNode, Directory, InferenceAgent},
		Worker:         {Operator, Ork, Monitor, InstanceAgent, InferenceAgent},
		InstanceAgent:  {AppNode, Monitor, Directory, Worker},
		InferenceAgent: {AppNode, Monitor, Directory, Proxy, Worker},
	} {
		if diff := cmp.Diff(want, AdmittedBy(server)); diff != "" {
			t.Errorf("%s admits (-want +got):\n%s", server, diff)
		}
	}
	if Admits(InstanceAgent, Operator) {
		t.Error("an agent admits operators")
	}
}

func TestPolicy(t *testing.T) {
	ring := NewKeyring()
	app, op, stranger := key(t), key(t), key(t)
	if err := ring.Add(AppNode, app); err != nil {
		t.Fatal(err)
	}
	if err := ring.Add(Operator, op); err != nil {
		t.Fatal(err)
	}
	if err := ring.Add(Ork, app); err == nil {
		t.Fatal("a key took two roles")
	}
	wA, wB := key(t), key(t)
	agentJ, agentK := key(t), key(t)
	ring.BindRack("a", wA)
	ring.BindRack("b", wB)
	ring.BindAgents(orkapi.Placement{Job: "j", Team: "t1", Type: cosmic.TypeGPUContainer, Replica: 0, Rack: "a"}, []fabric.PublicKey{agentJ})
	ring.BindAgents(orkapi.Placement{Job: "k", Team: "t2", Type: cosmic.TypeManagedInference, Replica: 1, Rack: "b"}, []fabric.PublicKey{agentK})

	ork := NewPolicy(Ork, ring)
	for _, tc := range []struct {
		key    fabric.PublicKey
		method string
		ok     bool
	}{
		{app, "createJob", true},
		{app, "ork.workerReport", false},
		{wA, "ork.workerReport", true},
		{wA, "listJobs", false},
		{wA, MethodPing, true},
		{op, "forgetRacks", true},
		{op, "anything", true},
		{agentJ, MethodPing, false},
		{stranger, MethodPing, false},
		{app, "undeclared", false},
	} {
		_, err := ork.Authorize(tc.key, tc.method)
		if (err == nil) != tc.ok {
			t.Errorf("ork: %s calling %s: %v, want allowed=%v", tc.key.Short(), tc.method, err, tc.ok)
		}
	}
	if ork.Access(agentJ) != fabric.AccessNone || ork.Access(wB) != fabric.AccessFull || ork.Access(stranger) != fabric.AccessNone {
		t.Error("ork's handshake admits the wrong keys")
	}
	g, err := NewPolicy(Directory, ring).Authorize(agentJ, "announce")
	if err != nil {
		t.Fatal(err)
	}
	want := Principal{Role: InstanceAgent, Rack: "a", Job: "j", Team: "t1", Replica: 0, VMI: 0}
	if got, ok := CallerOf(fabric.WithGrant(context.Background(), g)); !ok || got != want {
		t.Fatalf("grant %+v, want %+v", got, want)
	}
	// A worker's policy admits the agents of its own rack only.
	onA := NewPolicy(Worker, ring, OnRack("a"))
	if onA.Access(agentJ) != fabric.AccessFull || onA.Access(agentK) != fabric.AccessNone {
		t.Error("a worker's policy admits another rack's agent")
	}
	if _, err := onA.Authorize(agentJ, "inference.report"); err == nil {
		t.Error("an instance agent may send inference reports")
	}
}

func TestKeyringRevokesAndForgets(t *testing.T) {
	ring := NewKeyring()
	clock := time.Unix(1_700_000_000, 0)
	ring.now = func() time.Time { return clock }
	var mu sync.Mutex
	var revoked []fabric.PublicKey
	ring.OnRevoke(func(k fabric.PublicKey) { mu.Lock(); revoked = append(revoked, k); mu.Unlock() })
	w, a0, a1 := key(t), key(t), key(t)
	ring.Apply(orkapi.Peers{Epoch: "e", Version: 1, Racks: []orkapi.RackPeer{{Rack: "r", WorkerKey: w.String()}},
		Placements: []orkapi.Placement{{Job: "j", Team: "t", Type: cosmic.TypeManagedInference, Replica: 2, Rack: "r", AgentKeys: []string{a0.String(), a1.String()}}}})
	select {
	case <-ring.Synced():
	default:
		t.Fatal("not synced after Apply")
	}
	if !ring.IsAgent(a1, "j", 2, 1) || ring.IsAgent(a1, "j", 2, 0) || !ring.OnRack("j", "r") || ring.OnRack("j", "other") {
		t.Fatal("bindings not applied")
	}
	if p, _ := ring.Principal(a0); !p.Head() || p.Role != InferenceAgent {
		t.Fatalf("a0 is %+v", p)
	}
	// The replica goes away: its keys are revoked; its rack still counts
	// for a while.
	ring.Apply(orkapi.Peers{Epoch: "e", Version: 2, Racks: []orkapi.RackPeer{{Rack: "r", WorkerKey: w.String()}}})
	if _, ok := ring.Principal(a0); ok {
		t.Fatal("a0 still bound")
	}
	mu.Lock()
	got := slices.Clone(revoked)
	mu.Unlock()
	slices.SortFunc(got, func(x, y fabric.PublicKey) int { return strings.Compare(x.String(), y.String()) })
	want := []fabric.PublicKey{a0, a1}
	slices.SortFunc(want, func(x, y fabric.PublicKey) int { return strings.Compare(x.String(), y.String()) })
	if !slices.Equal(got, want) {
		t.Fatalf("revoked %v, want %v", got, want)
	}
	if !ring.OnRack("j", "r") {
		t.Fatal("a job that just left its rack no longer counts")
	}
	clock = clock.Add(rackGrace + time.Second)
	ring.Apply(orkapi.Peers{Epoch: "e", Version: 3})
	if ring.OnRack("j", "r") {
		t.Fatal("a job gone for longer than the grace still counts")
	}
	if _, ok := ring.Principal(w); ok {
		t.Fatal("the worker of a forgotten rack is still bound")
	}
}

// fakeOrk answers watchPeers like the ork: at once for another epoch or an
// older version, else when the version moves or the wait ends.
type fakeOrk struct {
	mu      sync.Mutex
	peers   orkapi.Peers
	changed chan struct{}
}

func (f *fakeOrk) set(p orkapi.Peers) {
	f.mu.Lock()
	p.Epoch, p.Version = "e", f.peers.Version+1
	f.peers = p
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

func (f *fakeOrk) WatchPeers(ctx context.Context, p orkapi.WatchPeersParams) (orkapi.Peers, error) {
	for {
		f.mu.Lock()
		cur, ch := f.peers, f.changed
		f.mu.Unlock()
		if p.Epoch != cur.Epoch || p.Since < cur.Version || p.WaitMillis == 0 {
			return cur, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return orkapi.Peers{}, ctx.Err()
		}
	}
}

func TestFollow(t *testing.T) {
	src := &fakeOrk{peers: orkapi.Peers{Epoch: "e"}, changed: make(chan struct{})}
	ring := NewKeyring()
	revoked := make(chan fabric.PublicKey, 4)
	ring.OnRevoke(func(k fabric.PublicKey) { revoked <- k })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ring.Follow(ctx, src, nil) }()
	defer func() { cancel(); <-done }()
	<-ring.Synced()
	a := key(t)
	src.set(orkapi.Peers{Placements: []orkapi.Placement{{Job: "j", Type: cosmic.TypeGPUContainer, Rack: "r", AgentKeys: []string{a.String()}}}})
	deadline := time.After(10 * time.Second)
	for !ring.IsAgent(a, "j", 0, 0) {
		select {
		case <-deadline:
			t.Fatal("the bound key never arrived")
		case <-time.After(time.Millisecond):
		}
	}
	src.set(orkapi.Peers{})
	select {
	case k := <-revoked:
		if k != a {
			t.Fatalf("revoked %s", k.Short())
		}
	case <-deadline:
		t.Fatal("the unbound key was never revoked")
	}
	if err := ring.Sync(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestStoppingAgentPushesOnly: the agent of a stopped replica whose VM
// powers off (orkapi.Placement.Stopping) may sign its volumes' requests
// and write its job's log, and call nothing else it could before.
func TestStoppingAgentPushesOnly(t *testing.T) {
	ring := NewKeyring()
	a := key(t)
	placed := orkapi.Placement{Job: "j", Team: "t", Type: cosmic.TypeGPUContainer, Rack: "r", AgentKeys: []string{a.String()}}
	ring.Apply(orkapi.Peers{Placements: []orkapi.Placement{placed}})
	app, wrk := NewPolicy(AppNode, ring), NewPolicy(Worker, ring)
	for _, c := range []struct {
		p      *Policy
		method string
	}{{app, dataapi.Presign.Name}, {wrk, agentapi.MethodReport}} {
		if _, err := c.p.Authorize(a, c.method); err != nil {
			t.Fatalf("a running replica's agent calling %s: %v", c.method, err)
		}
	}
	placed.Stopping = true
	ring.Apply(orkapi.Peers{Placements: []orkapi.Placement{placed}})
	if _, err := app.Authorize(a, dataapi.Presign.Name); err != nil {
		t.Errorf("a stopping agent signing its push: %v", err)
	}
	if _, err := wrk.Authorize(a, agentapi.MethodReport); err == nil || !strings.Contains(err.Error(), "stopping") {
		t.Errorf("a stopping agent reporting to its worker: %v, want refused as stopping", err)
	}
}
