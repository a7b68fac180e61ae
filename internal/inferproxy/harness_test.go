package inferproxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferagent"
	"github.com/cosmicac/cosmicac/internal/inferagent/simlaunch"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// harness is proxy-inference with agents and simulated runtimes, all
// in-process over a real fabric: a directory node (the ork's role), the
// proxy's node, and one dial-only agent node per VMI.
type harness struct {
	t       testing.TB
	dir     *fabric.Node
	pnode   *fabric.Node
	ring    *trust.Keyring // the proxy's: the agents are bound as the ork would bind them
	store   *sqlite.Store
	proxy   *Proxy
	srv     *httptest.Server
	keys    map[string]string // team → secret
	mu      sync.Mutex
	models  []Model
	agents  map[string][]*agentHandle
	baseCfg inferagent.Config
	// launcher, if set, starts the agents' runtimes in place of a
	// simlaunch.Launcher of the job's simruntime.Config.
	launcher inferagent.Launcher
}

type agentHandle struct {
	a      *inferagent.Agent
	sim    *simlaunch.Launcher
	cancel context.CancelFunc
	done   chan struct{}
}

// serveRuntime serves h as a runtime on loopback for the test's length
// and answers the launcher of it.
func serveRuntime(t *testing.T, h http.Handler) runtimeAt {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rt := &http.Server{Handler: h}
	go rt.Serve(ln)
	t.Cleanup(func() { rt.Close() })
	return runtimeAt(ln.Addr().String())
}

// runtimeAt is a launcher whose runtime already serves at its address:
// the benchmark's, which every path shares.
type runtimeAt string

func (a runtimeAt) Start(context.Context, inferagent.Launch) (inferagent.Process, error) {
	return &runningAt{addr: string(a), done: make(chan struct{})}, nil
}

type runningAt struct {
	addr string
	once sync.Once
	done chan struct{}
}

func (r *runningAt) Addr() string          { return r.addr }
func (r *runningAt) Done() <-chan struct{} { return r.done }
func (r *runningAt) Err() error            { return nil }
func (r *runningAt) Stop(time.Duration)    { r.once.Do(func() { close(r.done) }) }

type catalogFunc func() []Model

func (f catalogFunc) Models(ctx context.Context) ([]Model, error) {
	return StaticCatalog(f()).Models(ctx)
}

func (f catalogFunc) Down(ctx context.Context, team string) ([]Model, error) {
	return StaticCatalog(f()).Down(ctx, team)
}

func newNode(t testing.TB, name, listen string, policy fabric.Policy) *fabric.Node {
	t.Helper()
	id, err := fabric.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	n, err := fabric.New(fabric.Config{Component: name, Identity: id, Listen: listen, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func newHarness(t testing.TB, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t, keys: map[string]string{}, agents: map[string][]*agentHandle{}}
	anyone := fabric.PolicyFunc(func(fabric.PublicKey) fabric.Access { return fabric.AccessFull })
	h.dir = newNode(t, "wrk-ork", "127.0.0.1:0", anyone)
	fabric.NewDirectory(nil).Register(h.dir)
	h.ring = trust.NewKeyring()
	if err := h.ring.Add(trust.Directory, h.dir.PublicKey()); err != nil {
		t.Fatal(err)
	}
	h.pnode = newNode(t, "proxy-inference", "127.0.0.1:0", trust.NewPolicy(trust.Proxy, h.ring))
	h.pnode.AddAddrs(h.dir.PublicKey(), h.dir.Addr())
	var err error
	if h.store, err = sqlite.Open(filepath.Join(t.TempDir(), "db")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.store.Close() })
	ctx := context.Background()
	for _, team := range []string{"team-a", "team-b"} {
		if err := h.store.CreateTeam(ctx, cosmic.Team{Name: team}); err != nil {
			t.Fatal(err)
		}
		k, secret, err := appnode.NewAPIKey("test", team, "admin", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := h.store.CreateAPIKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		h.keys[team] = secret
	}
	h.proxy = mustNew(t, cfg, Deps{Node: h.pnode, Directories: []fabric.PublicKey{h.dir.PublicKey()}, Catalog: catalogFunc(func() []Model {
		h.mu.Lock()
		defer h.mu.Unlock()
		return append([]Model(nil), h.models...)
	}), Keys: h.store, Agents: h.ring})
	h.srv = httptest.NewServer(h.proxy.Handler())
	t.Cleanup(func() {
		h.srv.Close()
		h.proxy.Close()
		for _, as := range h.agents {
			for _, a := range as {
				a.cancel()
				<-a.done
			}
		}
	})
	h.baseCfg = inferagent.Config{HealthPoll: 10 * time.Millisecond, ProbeInterval: time.Second, AnnounceTTL: 3 * time.Second}
	return h
}

// addJob starts the agents of a job's replicas (vmis VMIs each) and lists
// the model in the catalog.
func (h *harness) addJob(jobID, team, name string, rt cosmic.Runtime, replicas, vmis int, requireAuth bool, sim simruntime.Config) {
	h.t.Helper()
	model := "Qwen/Qwen3-8B"
	if rt == cosmic.RuntimeParakeet {
		model = cosmic.ParakeetModel
	}
	h.addJobSpec(jobID, team, cosmic.InferenceSpec{Runtime: rt, Model: model, ServedModelName: name, RequireAuth: &requireAuth}, replicas, vmis, sim)
}

// addJobSpec is addJob of a job with this inference section (its args, …).
func (h *harness) addJobSpec(jobID, team string, in cosmic.InferenceSpec, replicas, vmis int, sim simruntime.Config) {
	h.t.Helper()
	h.mu.Lock()
	h.models = append(h.models, Model{Name: in.ServedModelName, JobID: jobID, Team: team, RequireAuth: in.AuthRequired(), Runtime: in.Runtime, ModelID: in.Model, Created: time.Now(),
		Routing: in.Routing, Adapters: adapterNames(&in)})
	h.mu.Unlock()
	var hosts []string
	for i := range vmis {
		hosts = append(hosts, jobID+"-vmi"+string(rune('0'+i)))
	}
	for r := range replicas {
		var keys []fabric.PublicKey
		for v := range vmis {
			id, _ := fabric.GenerateIdentity()
			keys = append(keys, id.PublicKey())
			cfg := h.baseCfg
			cfg.JobID, cfg.Team, cfg.Replica, cfg.Inference, cfg.Identity = jobID, team, r, in, id
			cfg.Placement = inferagent.Placement{VMIIndex: v, VMICount: vmis, GPUs: 1}
			if vmis > 1 {
				cfg.Placement.Hosts = hosts
			}
			sl := &simlaunch.Launcher{Config: sim}
			cfg.Launcher = sl
			if h.launcher != nil {
				cfg.Launcher, sl = h.launcher, nil
			}
			cfg.Peers = []inferagent.Peer{
				{Role: agentapi.RoleDirectory, Key: h.dir.PublicKey(), Addrs: []string{h.dir.Addr()}},
				{Role: agentapi.RoleProxy, Key: h.pnode.PublicKey(), Addrs: []string{h.pnode.Addr()}},
			}
			a := inferagent.New(cfg, nil)
			ctx, cancel := context.WithCancel(context.Background())
			ah := &agentHandle{a: a, sim: sl, cancel: cancel, done: make(chan struct{})}
			go func() {
				defer close(ah.done)
				a.Run(ctx)
			}()
			h.agents[jobID] = append(h.agents[jobID], ah)
		}
		h.ring.BindAgents(orkapi.Placement{Job: jobID, Team: team, Type: cosmic.TypeManagedInference, Replica: r, Rack: "r1"}, keys)
	}
}

// waitReady waits until the proxy sees n ready replicas of job.
func (h *harness) waitReady(jobID string, n int) {
	h.t.Helper()
	waittest.NoError(h.t, func() error {
		mh, _ := h.proxy.JobHealth(context.Background(), jobID)
		ready := 0
		for _, r := range mh.Replicas {
			if r.Ready {
				ready++
			}
		}
		if ready != n {
			return fmt.Errorf("%d of %d replicas ready: %+v", ready, n, mh)
		}
		return nil
	}, "job %s ready", jobID)
}

// expireLookup makes the proxy's next request of job look its replicas
// up afresh, as it does once LookupTTL has passed.
func (h *harness) expireLookup(jobID string) {
	s := h.proxy.replicas
	s.mu.Lock()
	p := s.pools[jobID]
	s.mu.Unlock()
	if p == nil {
		h.t.Fatalf("the proxy has not looked %s up", jobID)
	}
	p.mu.Lock()
	p.at = time.Time{}
	p.mu.Unlock()
}

// held is the number of job's streams held before their first token
// (simruntime.Config.Hold) by its runtimes.
func (h *harness) held(jobID string) int {
	n := 0
	for _, a := range h.agents[jobID] {
		if r := a.sim.Runtime(); r != nil {
			n += r.Held()
		}
	}
	return n
}
