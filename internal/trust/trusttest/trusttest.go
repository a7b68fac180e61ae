// Package trusttest checks a running platform against the trust graph's
// declaration (internal/trust.Graph): every fabric method of every server,
// called with the key of every class of caller (the component meant to
// call it, the other platform components, an operator, the worker of this
// rack and of another, this job's agent and another job's, an unknown
// key), must be allowed exactly where the declaration allows it, agents
// and workers confined to their own job or rack. The same Matrix runs
// against `cosmicac up` (internal/cosmictest) and against the components
// started as separate processes (internal/cli/systest).
//
// The caller holds every key a class stands for, as an attacker who has it
// would: the platform's keys are read from the data directories, a job's
// agent key is the one its worker issued (the user's, in their VM).
//
// Importers: tests only.
package trusttest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/datasync"
	"github.com/cosmicac/cosmicac/internal/datasync/dataapi"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferagent"
	"github.com/cosmicac/cosmicac/internal/inferagent/simlaunch"
	"github.com/cosmicac/cosmicac/internal/inferproxy/keyapi"
	"github.com/cosmicac/cosmicac/internal/inferproxy/proxyapi"
	"github.com/cosmicac/cosmicac/internal/inferproxy/usageapi"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/simcluster/simapi"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// Peer is a fabric peer: its key and addresses.
type Peer struct {
	Key   fabric.PublicKey
	Addrs []string
}

// String is KEY@ADDR.
func (p Peer) String() string {
	if len(p.Addrs) == 0 {
		return p.Key.String()
	}
	return p.Key.String() + "@" + p.Addrs[0]
}

// Deployment is what the matrix needs of a running platform.
type Deployment struct {
	// API is a client of the HTTP API with the bootstrap admin's token.
	API *client.Client
	// Servers are the platform's components, by role: trust.Ork,
	// trust.AppNode, trust.Monitor, trust.Directory, trust.Proxy, and
	// trust.Worker, the worker of a registered rack (WorkerRack).
	Servers map[trust.Role]Peer
	// WorkerRack is the rack of Servers[trust.Worker] and WorkerLocation
	// its location.
	WorkerRack, WorkerLocation string
	// Identities are the platform's keys, by role: trust.Ork,
	// trust.AppNode, trust.Monitor, trust.Directory, trust.Proxy, and
	// trust.Operator when the platform admits an operator (others are not
	// used: the matrix never wears the deployment's worker's key).
	Identities map[trust.Role]*fabric.Identity
	// RackAgent, if set, returns the identity WorkerRack's worker issued
	// to the head agent of a running job's replica 0 (nil: that worker runs
	// no agents, and its agent-only cells are only checked for refusals).
	RackAgent func(jobID string) (*fabric.Identity, bool)
}

// TestRack is the location of the rack the matrix registers, with a worker
// of its own (matrixRack).
const (
	TestRack     = "matrix"
	TestLocation = "matrix"
)

// Fixture is what a matrix run sets up: a second rack with a worker the
// test plays, four jobs on it, and real agents of two of them serving as
// the agent servers.
type Fixture struct {
	d    Deployment
	rack *matrixRack
	// other is the worker key of a third rack, registered and never up:
	// "the worker of another rack" (not the deployment's own worker, whose
	// key the matrix would otherwise wear before the ork).
	other *fabric.Identity
	// Jobs on the test rack: two gpu-container jobs (K, K2) and two
	// managed-inference jobs (L, L2); the agents of K and L run (the
	// servers of the agents' methods), those of K2 and L2 are keys only.
	K, K2, L, L2 cosmic.Job
	// Agents of the test rack's jobs' replica 0 (head), by job ID.
	agentIDs map[string]*fabric.Identity
	instance Peer // agent of K, listening
	infer    Peer // agent of L, listening
	// served are the methods the agents' nodes serve.
	served map[trust.Role][]string
	kAgent *agent.Agent
	// On the deployment's worker's rack, when it issues agents: a
	// gpu-container job (S) and its agent's identity.
	S       cosmic.Job
	sAgent  *fabric.Identity
	stopAll func()
}

// Setup registers the test rack, runs the four jobs on it, and starts the
// agents of K and L as their VMs would, with listening nodes.
func Setup(ctx context.Context, t *testing.T, d Deployment) *Fixture {
	t.Helper()
	f := &Fixture{d: d, agentIDs: map[string]*fabric.Identity{}}
	var err error
	orkPeer := d.Servers[trust.Ork]
	f.rack = newMatrixRack(t, orkPeer)
	if _, err := d.API.RegisterRack(ctx, apiv1.RegisterRack{ID: TestRack, Location: TestLocation, GPUModel: "GH100_H100_SXM5_80GB",
		WorkerKey: f.rack.id.PublicKey().String(), WorkerAddrs: []string{f.rack.node.Addr()}}); err != nil {
		t.Fatalf("register the matrix rack: %v", err)
	}
	if f.other, err = fabric.GenerateIdentity(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.API.RegisterRack(ctx, apiv1.RegisterRack{ID: TestRack + "-other", Location: TestLocation + "-other", GPUModel: "GH100_H100_SXM5_80GB",
		WorkerKey: f.other.PublicKey().String(), WorkerAddrs: []string{"127.0.0.1:1"}}); err != nil {
		t.Fatalf("register the other rack: %v", err)
	}
	create := func(name string, typ cosmic.JobType, location string) cosmic.Job {
		spec := cosmic.Spec{Type: typ, Name: name, Location: location, Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: 1}}
		if typ == cosmic.TypeManagedInference {
			spec.Image = ""
			spec.Inference = &cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-0.6B", ServedModelName: name, Replicas: 1, GPUsPerReplica: 1}
			spec.Resources = cosmic.Resources{}
		}
		j, err := d.API.CreateJob(ctx, spec)
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		if j, err = d.API.WaitJob(ctx, j.ID, client.Settled, nil); err != nil || j.Status.State != cosmic.StateRunning {
			t.Fatalf("job %s: %s (%v)", name, j.Status.State, err)
		}
		return j
	}
	f.K = create("matrix-k", cosmic.TypeGPUContainer, TestLocation)
	f.K2 = create("matrix-k2", cosmic.TypeGPUContainer, TestLocation)
	f.L = create("matrix-l", cosmic.TypeManagedInference, TestLocation)
	f.L2 = create("matrix-l2", cosmic.TypeManagedInference, TestLocation)
	for _, j := range []cosmic.Job{f.K, f.K2, f.L, f.L2} {
		f.agentIDs[j.ID] = f.rack.agent(j.ID)
	}
	if d.RackAgent != nil {
		f.S = create("matrix-s", cosmic.TypeGPUContainer, d.WorkerLocation)
		id, ok := d.RackAgent(f.S.ID)
		if !ok {
			t.Fatalf("the rack's worker issued job %s no agent", f.S.ID)
		}
		f.sAgent = id
	}

	// The agents of K and L, as their VMs run them, listening so that
	// the matrix can call them.
	actx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	peer := func(role string, r trust.Role) agent.Peer {
		p := d.Servers[r]
		return agent.Peer{Role: role, Key: p.Key, Addrs: p.Addrs}
	}
	wp := agent.Peer{Role: agentapi.RoleWorker, Key: f.rack.id.PublicKey(), Addrs: []string{f.rack.node.Addr()}}
	mon := agent.Peer{Role: agentapi.RoleMonitor, Key: d.Servers[trust.Monitor].Key}
	ka := agent.New(agent.Config{JobID: f.K.ID, Team: f.K.Team, Identity: f.agentIDs[f.K.ID], Shell: "/bin/sh", WorkDir: t.TempDir(),
		Listen: "127.0.0.1:0", Peers: []agent.Peer{peer(agentapi.RoleDirectory, trust.Directory), peer(agentapi.RoleAppNode, trust.AppNode), wp, mon}}, nil)
	la := inferagent.New(inferagent.Config{JobID: f.L.ID, Team: f.L.Team, Placement: inferagent.Placement{VMICount: 1, GPUs: 1},
		Inference: *f.L.Spec.Inference, Identity: f.agentIDs[f.L.ID], Listen: "127.0.0.1:0",
		Peers:    []agent.Peer{peer(agentapi.RoleDirectory, trust.Directory), peer(agentapi.RoleProxy, trust.Proxy), peer(agentapi.RoleAppNode, trust.AppNode), wp, mon},
		Launcher: &simlaunch.Launcher{Config: simruntime.Config{TTFT: time.Millisecond}}, HealthPoll: 20 * time.Millisecond,
		ProbeInterval: 2 * time.Second, AnnounceTTL: 6 * time.Second}, nil)
	wg.Go(func() { ka.Run(actx) })
	wg.Go(func() { la.Run(actx) })
	f.stopAll = func() { cancel(); wg.Wait() }
	t.Cleanup(f.stopAll)
	for ka.Node() == nil || la.Node() == nil {
		select {
		case <-ctx.Done():
			t.Fatal("the agents never started")
		case <-time.After(10 * time.Millisecond):
		}
	}
	f.instance = Peer{Key: ka.Node().PublicKey(), Addrs: []string{ka.Node().Addr()}}
	f.infer = Peer{Key: la.Node().PublicKey(), Addrs: []string{la.Node().Addr()}}
	f.served = map[trust.Role][]string{trust.InstanceAgent: ka.Node().Methods(), trust.InferenceAgent: la.Node().Methods()}
	f.kAgent = ka
	select {
	case <-ka.Ready():
	case <-ctx.Done():
		t.Fatal("the instance agent never became ready")
	}
	return f
}

// AgentMethods are the methods the agents' nodes serve, by role.
func (f *Fixture) AgentMethods() map[trust.Role][]string { return f.served }

// builtin are the methods every fabric node serves on its own.
var builtin = []string{trust.MethodPing, fabric.MethodPark}

// CheckServed fails t unless the methods a server's node registers are
// those Graph declares for its role (the fabric's own ping and park aside,
// unless declared).
func CheckServed(t *testing.T, role trust.Role, methods []string) {
	t.Helper()
	s, ok := trust.ServerOf(role)
	if !ok {
		t.Fatalf("no declaration of %s", role)
	}
	declared := map[string]bool{}
	for _, m := range s.Methods {
		declared[m.Name] = true
		if !slices.Contains(methods, m.Name) {
			t.Errorf("%s: %s is declared but not served", role, m.Name)
		}
	}
	for _, m := range methods {
		if !declared[m] && !slices.Contains(builtin, m) {
			t.Errorf("%s serves %s, which trust.Graph does not declare (deny by default: only operators may call it)", role, m)
		}
	}
}

// AgentOf returns the identity the test rack's worker issued to the head
// agent of one of its jobs (K, K2, L, L2).
func (f *Fixture) AgentOf(jobID string) *fabric.Identity { return f.agentIDs[jobID] }

// RackWorker is the identity of the test rack's worker.
func (f *Fixture) RackWorker() *fabric.Identity { return f.rack.id }

// caller is one class of key in the matrix.
type caller struct {
	name string
	role trust.Role // "" for the unknown key
	own  bool       // a bound key's binding covers the target
	id   *fabric.Identity
}

// Cell is one cell of the matrix as it ran.
type Cell struct {
	Server  trust.Role
	Method  string
	Caller  string
	Want    bool
	Got     bool
	Detail  string
	Skipped string
}

// Matrix runs every cell and fails t for each that disagrees with the
// declaration. It returns the cells, for the test to log or count.
func (f *Fixture) Matrix(ctx context.Context, t *testing.T) []Cell {
	t.Helper()
	var cells []Cell
	skipped := map[string][]string{} // why → the cells
	defer func() {
		for why, which := range skipped {
			t.Logf("%d cells not run (%s): %s", len(which), why, strings.Join(which, ", "))
		}
	}()
	for _, s := range trust.Graph {
		methods := append([]trust.Method{{Name: trust.MethodPing, Kind: trust.Call}}, s.Methods...)
		for _, m := range methods {
			for _, c := range f.callers(s.Role, m) {
				if c.id != nil && c.id.PublicKey() == f.target(s.Role).Key {
					continue // a node does not call itself
				}
				cell := f.run(ctx, t, s.Role, m, c)
				cells = append(cells, cell)
				switch {
				case cell.Skipped != "":
					skipped[cell.Skipped] = append(skipped[cell.Skipped], fmt.Sprintf("%s %s by %s", cell.Server, cell.Method, cell.Caller))
				case cell.Got != cell.Want:
					t.Errorf("%s %s by %s: allowed=%v, the declaration says %v (%s)", cell.Server, cell.Method, cell.Caller, cell.Got, cell.Want, cell.Detail)
				}
			}
		}
	}
	return cells
}

// callers are the classes of key for a cell of server: the platform's
// roles and an operator, the workers of the target's rack and of another,
// this job's and another job's agent of each kind, and an unknown key.
func (f *Fixture) callers(server trust.Role, m trust.Method) []caller {
	var out []caller
	for _, r := range []trust.Role{trust.Operator, trust.Ork, trust.AppNode, trust.Monitor, trust.Directory, trust.Proxy} {
		if id := f.d.Identities[r]; id != nil {
			out = append(out, caller{name: string(r), role: r, id: id})
		}
	}
	if server == trust.Worker {
		// The target rack is the deployment's worker's own (whose key the
		// matrix does not call itself with).
		out = append(out, caller{name: "worker of another rack", role: trust.Worker, id: f.rack.id})
	} else {
		out = append(out, caller{name: "worker of this rack", role: trust.Worker, own: true, id: f.rack.id},
			caller{name: "worker of another rack", role: trust.Worker, id: f.other})
	}
	if server == trust.Worker {
		out = append(out, caller{name: "this job's instance agent", role: trust.InstanceAgent, own: true, id: f.sAgent}) // nil: run() says why not
		out = append(out, caller{name: "another job's instance agent", role: trust.InstanceAgent, id: f.agentIDs[f.K.ID]},
			caller{name: "another job's inference agent", role: trust.InferenceAgent, id: f.agentIDs[f.L.ID]})
	} else {
		out = append(out,
			caller{name: "this job's instance agent", role: trust.InstanceAgent, own: true, id: f.agentIDs[f.K.ID]},
			caller{name: "another job's instance agent", role: trust.InstanceAgent, id: f.agentIDs[f.K2.ID]},
			caller{name: "this job's inference agent", role: trust.InferenceAgent, own: true, id: f.agentIDs[f.L.ID]},
			caller{name: "another job's inference agent", role: trust.InferenceAgent, id: f.agentIDs[f.L2.ID]})
	}
	unknown, _ := fabric.GenerateIdentity()
	return append(out, caller{name: "unknown key", id: unknown})
}

// want is the declaration's answer for a cell: the role may call the
// method, and a bound key only within its binding. A bound key outside the
// target's binding is still admitted (and may ping) where every rack's and
// job's keys are, on the components that follow the ork; a worker admits
// only its own agents, an agent only its own worker.
func want(server trust.Role, m trust.Method, c caller) bool {
	switch {
	case c.role == "" || !trust.Calls(server, m.Name, c.role):
		return false
	case !c.role.Bound() || c.own:
		return true
	case m.Name != trust.MethodPing:
		return false
	}
	return server != trust.Worker && !server.IsAgent()
}

func (f *Fixture) target(server trust.Role) Peer {
	switch server {
	case trust.InstanceAgent:
		return f.instance
	case trust.InferenceAgent:
		return f.infer
	}
	return f.d.Servers[server]
}

// run calls one cell.
func (f *Fixture) run(ctx context.Context, t *testing.T, server trust.Role, m trust.Method, c caller) Cell {
	cell := Cell{Server: server, Method: m.Name, Caller: c.name, Want: want(server, m, c)}
	if c.id == nil {
		cell.Skipped = "this deployment's rack worker runs no agents (a standalone simulated rack); the Kubernetes worker's own tests check its agents' reports"
		return cell
	}
	tgt := f.target(server)
	n, err := fabric.New(fabric.Config{Component: "matrix", Identity: c.id, Policy: fabric.NewAllowList(tgt.Key)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	n.AddAddrs(tgt.Key, tgt.Addrs...)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	allowed, detail, err := f.probe(cctx, n, tgt, server, m, c)
	if err != nil {
		t.Errorf("%s %s by %s: %v", server, m.Name, c.name, err)
	}
	cell.Got, cell.Detail = allowed, detail
	return cell
}

// refusal reads a call's error: refused by the handshake or the policy,
// or (err) a declared method the server does not serve.
func refusal(callErr error) (refused bool, detail string, err error) {
	if callErr == nil {
		return false, "ok", nil
	}
	switch code := fabric.ErrorCode(callErr); code {
	case fabric.CodeRefused, fabric.CodeForbidden:
		return true, callErr.Error(), nil
	case fabric.CodeNotFound:
		if strings.Contains(callErr.Error(), "no method") {
			return false, "", fmt.Errorf("declared but not served: %w", callErr)
		}
	}
	return false, callErr.Error(), nil
}

// probe calls m on the server as c and says whether it was allowed.
func (f *Fixture) probe(ctx context.Context, n *fabric.Node, tgt Peer, server trust.Role, m trust.Method, c caller) (bool, string, error) {
	key := tgt.Key
	call := func(params any, result any) (bool, string, error) {
		refused, detail, err := refusal(n.Call(ctx, key, m.Name, params, result))
		return !refused, detail, err
	}
	stream := func(params any) (bool, string, error) {
		s, callErr := n.OpenStream(ctx, key, m.Name, params, nil)
		if s != nil {
			s.Close()
		}
		refused, detail, err := refusal(callErr)
		return !refused, detail, err
	}
	nowhere := "00000000-0000-4000-8000-000000000000"
	target := f.K
	if c.role == trust.InferenceAgent {
		target = f.L
	}
	switch m.Name {
	case trust.MethodPing:
		return call(nil, nil)
	// wrk-ork: params that change nothing.
	case orkapi.MethodCreateJob, orkapi.MethodRegisterRack:
		return call(struct{}{}, nil)
	case orkapi.MethodGetJob:
		return call(map[string]string{"id": f.K.ID}, nil)
	case orkapi.MethodListJobs, orkapi.MethodListRacks:
		return call(struct{}{}, nil)
	case orkapi.MethodDeleteJob, orkapi.MethodRestartJob, orkapi.MethodKillJob, orkapi.MethodLabelJob, orkapi.MethodSetRequireAuth:
		return call(map[string]any{"id": nowhere, "name": "a", "value": "b"}, nil)
	case orkapi.MethodUpdateJob: // a job that does not exist: nothing changes
		return call(orkapi.UpdateJobParams{ID: nowhere, Spec: cosmic.Spec{Type: cosmic.TypeManagedInference, Location: "nowhere",
			Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "a/b"}}}, nil)
	case orkapi.MethodReportLoad: // an empty report: no job's load changes
		return call(orkapi.LoadReport{}, nil)
	case orkapi.MethodForgetRacks:
		return call(map[string]any{"ids": []string{"no-such-rack"}}, nil)
	case orkapi.MethodDeleteVolume: // a volume no rack keeps: nothing is removed
		return call(orkapi.VolumeRef{Team: "no-such-team", Name: "none"}, nil)
	case orkapi.MethodWatchPeers:
		return call(orkapi.WatchPeersParams{}, nil)
	case orkapi.MethodWatchJobs: // without a version: answered at once
		return call(struct{}{}, nil)
	case orkapi.MethodSetQuota: // without a team: invalid, nothing set
		return call(struct{}{}, nil)
	case orkapi.MethodDeleteQuota:
		return call(map[string]any{"team": "no-such-team", "location": "nowhere"}, nil)
	case orkapi.MethodListQuotas:
		return call(struct{}{}, nil)
	case worker.MethodReport:
		return call(worker.Report{Rack: TestRack, Jobs: []worker.JobReport{}}, nil)
	// app-node
	case keyapi.ByHash.Name:
		return call(map[string]any{"hash": make([]byte, 32)}, nil)
	case usageapi.Record.Name: // an empty batch ID: invalid, nothing recorded
		return call(usageapi.RecordParams{}, nil)
	case agentapi.MethodDataSync: // no volume named: nothing moves
		return call(agentapi.DataSyncParams{Direction: "pull"}, nil)
	case dataapi.Presign.Name: // the target job has no volume and no model source: nothing signed
		// An instance agent asks for a volume, an inference agent for its
		// job's model (what each may sign for).
		return call(dataapi.PresignParams{Job: target.ID, Volume: 0, Op: datasync.OpList, Model: c.role == trust.InferenceAgent}, nil)
	// wrk-monitor: a record of the target job; a caller outside its
	// binding has it refused.
	case joblog.Append.Name:
		var rep joblog.AppendReply
		rec := joblog.Record{Time: time.Now(), JobID: target.ID, Source: joblog.SourceApplication, Stream: "stdout", Line: "matrix probe by " + c.name}
		ok, detail, err := call(joblog.AppendParams{Records: []joblog.Record{rec}}, &rep)
		if ok && detail == "ok" {
			ok, detail = rep.Accepted == 1 && rep.Refused == 0, fmt.Sprintf("accepted %d, refused %d", rep.Accepted, rep.Refused)
		}
		return ok, detail, err
	// wrk-directory
	case fabric.MethodAnnounce:
		meta, _ := json.Marshal(map[string]any{"jobId": target.ID, "replica": 0, "vmiIndex": 0, "role": "head"})
		return call(fabric.AnnounceParams{Topic: trust.AgentTopic(agentRoleOr(c.role), target.ID), TTLSeconds: 30, Meta: meta}, nil)
	case fabric.MethodUnannounce:
		return f.probeUnannounce(ctx, n, tgt, c, target)
	case fabric.MethodLookup:
		return call(fabric.LookupParams{Topic: agentapi.Topic(f.K.ID)}, nil)
	// proxy-inference
	case proxyapi.Health.Name:
		return call(map[string]string{"jobId": f.L.ID}, nil)
	// a rack's worker
	case worker.MethodCapacity, worker.MethodJobs:
		return call(struct{}{}, nil)
	case worker.MethodApply:
		return call(struct{}{}, nil) // a job without an ID: refused as bad_request
	case worker.MethodStop, worker.MethodRestart, worker.MethodDelete:
		return call(map[string]any{"jobId": nowhere, "replica": 0}, nil)
	case worker.MethodDeleteVolume: // the matrix's rack keeps none: nothing is removed
		return call(worker.VolumeRef{Team: "no-such-team", Name: "none"}, nil)
	case agentapi.MethodReport, agentapi.MethodInferenceReport:
		// Reports are events; called as calls, their refusal is seen.
		return call(map[string]any{"jobId": nowhere}, nil)
	case simapi.MethodFailImport, simapi.MethodCrash, simapi.MethodHoldAgent:
		return call(map[string]any{"jobId": nowhere}, nil)
	case simapi.MethodLoseNode, simapi.MethodRestoreNode:
		return call(map[string]any{"node": "no-such-node"}, nil)
	case simapi.MethodUnreachable:
		return call(map[string]any{"seconds": 0}, nil) // refused as bad_request
	// the agents
	case agentapi.MethodShell:
		return stream(shellproto.OpenParams{Argv: []string{"true"}})
	case agentapi.MethodTCPConnect:
		return stream(agentapi.TCPConnectParams{Port: agentapi.DefaultSSHPort}) // open to the platform; nothing need listen
	case agentapi.MethodStatus, agentapi.MethodInferenceStatus:
		return call(struct{}{}, nil)
	case agentapi.MethodInferenceHTTP:
		return stream(nil)
	case fabric.MethodPark:
		return call(fabric.ParkParams{Count: 1}, nil)
	}
	return false, "", fmt.Errorf("the matrix has no probe for %s.%s: add one", server, m.Name)
}

func agentRoleOr(r trust.Role) trust.Role {
	if r.IsAgent() {
		return r
	}
	return trust.InstanceAgent
}

// probeUnannounce: an agent withdraws only its own announcement. Another
// job's agent's unannounce of the target's topic must leave the target's
// agent listed ("refused"); the target's own agent withdraws its own
// (allowed), and announces again.
func (f *Fixture) probeUnannounce(ctx context.Context, n *fabric.Node, tgt Peer, c caller, target cosmic.Job) (bool, string, error) {
	key := tgt.Key
	topicRole := agentRoleOr(c.role)
	if !c.role.IsAgent() {
		refused, detail, err := refusal(n.Call(ctx, key, fabric.MethodUnannounce, fabric.LookupParams{Topic: trust.AgentTopic(topicRole, target.ID)}, nil))
		return !refused, detail, err
	}
	topic := trust.AgentTopic(topicRole, target.ID)
	owner := f.agentIDs[target.ID]
	on, err := fabric.New(fabric.Config{Component: "matrix-owner", Identity: owner, Policy: fabric.NewAllowList(key)})
	if err != nil {
		return false, "", err
	}
	defer on.Close()
	on.AddAddrs(key, tgt.Addrs...)
	meta, _ := json.Marshal(map[string]any{"jobId": target.ID, "replica": 0, "vmiIndex": 0, "role": "head", "ready": true})
	announce := func() error {
		return on.Call(ctx, key, fabric.MethodAnnounce, fabric.AnnounceParams{Topic: topic, TTLSeconds: 30, Meta: meta}, nil)
	}
	if err := announce(); err != nil {
		return false, "", fmt.Errorf("the target's agent could not announce: %w", err)
	}
	lister := f.d.Identities[trust.AppNode]
	ln, err := fabric.New(fabric.Config{Component: "matrix-lookup", Identity: lister, Policy: fabric.NewAllowList(key)})
	if err != nil {
		return false, "", err
	}
	defer ln.Close()
	ln.AddAddrs(key, tgt.Addrs...)
	// The job's real agent refreshes its announcement too: one that lands
	// between the unannounce and the lookup lists the agent again. An
	// unannounce that works leaves it unlisted at least once in a few
	// tries; one that is ignored never does.
	listed := true
	for try := 0; try < 3 && listed; try++ {
		refused, detail, err := refusal(n.Call(ctx, key, fabric.MethodUnannounce, fabric.LookupParams{Topic: topic}, nil))
		if refused || err != nil {
			return false, detail, err
		}
		peers, err := ln.Lookup(ctx, topic, key)
		if err != nil {
			return false, "", err
		}
		listed = slices.ContainsFunc(peers, func(p fabric.PeerInfo) bool { return p.Key == owner.PublicKey() })
	}
	if !listed {
		announce() // the real agent refreshes too; do not wait for it
	}
	return !listed, fmt.Sprintf("after the call the target's agent is listed: %v", listed), nil
}

// ---- the test rack's worker

// matrixRack is a rack worker the test plays: one node of 8 GPUs whose
// replicas run at once, each with an agent identity it issues and reports
// (AgentKeys), as the Kubernetes worker does.
type matrixRack struct {
	id   *fabric.Identity
	node *fabric.Node
	rep  *worker.ReporterClient
	ring *trust.Keyring // its node's: the ork, and the agents it issued

	mu     sync.Mutex
	jobs   map[string]worker.ReplicaReport
	agents map[string]*fabric.Identity
}

func newMatrixRack(t *testing.T, ork Peer) *matrixRack {
	id, err := fabric.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	ring := trust.NewKeyring()
	if err := ring.Add(trust.Ork, ork.Key); err != nil {
		t.Fatal(err)
	}
	n, err := fabric.New(fabric.Config{Component: "matrix-rack", Identity: id, Listen: "127.0.0.1:0", Policy: trust.NewPolicy(trust.Worker, ring)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	n.AddAddrs(ork.Key, ork.Addrs...)
	r := &matrixRack{id: id, node: n, ring: ring, rep: worker.NewReporterClient(n, ork.Key), jobs: map[string]worker.ReplicaReport{}, agents: map[string]*fabric.Identity{}}
	worker.Serve(n, r)
	// The agents of K and L report here too.
	for _, method := range []string{agentapi.MethodReport, agentapi.MethodInferenceReport} {
		fabric.HandleFunc(n, method, func(context.Context, fabric.PublicKey, json.RawMessage) (struct{}, error) { return struct{}{}, nil })
	}
	return r
}

func (w *matrixRack) agent(jobID string) *fabric.Identity {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.agents[jobID]
}

func (w *matrixRack) Capacity(context.Context) (worker.Capacity, error) {
	return worker.Capacity{Rack: TestRack, ObservedAt: time.Now(), Nodes: []cosmic.Node{
		{Name: "m0", Rack: TestRack, GPUModel: "GH100_H100_SXM5_80GB", GPUs: 8, Schedulable: true, Ready: true}}}, nil
}

func (w *matrixRack) set(job string, rr worker.ReplicaReport) {
	w.mu.Lock()
	w.jobs[job] = rr
	w.mu.Unlock()
	go w.rep.Report(context.Background(), worker.Report{Rack: TestRack, Jobs: []worker.JobReport{{JobID: job, Replicas: []worker.ReplicaReport{rr}}}})
}

func (w *matrixRack) Apply(_ context.Context, p worker.ApplyParams) error {
	for _, r := range p.Reservations {
		w.mu.Lock()
		id := w.agents[p.Job.ID]
		if id == nil {
			id, _ = fabric.GenerateIdentity()
			w.agents[p.Job.ID] = id
		}
		w.mu.Unlock()
		w.ring.BindAgents(orkapi.Placement{Job: p.Job.ID, Team: p.Job.Team, Type: p.Job.Spec.Type, Replica: r.Replica, Rack: TestRack}, []fabric.PublicKey{id.PublicKey()})
		w.set(p.Job.ID, worker.ReplicaReport{Replica: r.Replica, State: cosmic.StateRunning, Nodes: []string{"m0"}, AgentKeys: []string{id.PublicKey().String()}})
	}
	return nil
}

func (w *matrixRack) Stop(_ context.Context, r worker.ReplicaRef) error {
	k := cosmic.NewReason(cosmic.ReasonKilled, "")
	w.set(r.JobID, worker.ReplicaReport{Replica: r.Replica, State: cosmic.StateStopped, Reason: &k})
	return nil
}

func (w *matrixRack) Restart(context.Context, worker.ReplicaRef) error { return nil }

func (w *matrixRack) Delete(_ context.Context, p worker.DeleteParams) error {
	w.set(p.JobID, worker.ReplicaReport{Replica: 0, State: cosmic.StateStopped, Gone: true})
	return nil
}

func (w *matrixRack) DeleteVolume(context.Context, worker.VolumeRef) error { return nil }

func (w *matrixRack) Jobs(context.Context) ([]worker.JobReport, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := []worker.JobReport{}
	for id, rr := range w.jobs {
		if !rr.Gone {
			out = append(out, worker.JobReport{JobID: id, Replicas: []worker.ReplicaReport{rr}})
		}
	}
	return out, nil
}

// ---- the attacks the declaration answers

// Hijack replays the model hijack: the key of another job's inference
// agent (L2's: the attacker has root in L2's VM) announces itself as the
// head replica of job L and serves inference.http, while L's team sends
// chat completions with its own API key to proxy-inference at infURL
// (…/inference/v1). The directory refuses the announcement, and not one
// request reaches the attacker: every one is answered by L's own agent.
func (f *Fixture) Hijack(ctx context.Context, t *testing.T, infURL string) {
	t.Helper()
	key, err := f.d.API.CreateAPIKey(ctx, "matrix-hijack", "")
	if err != nil {
		t.Fatal(err)
	}
	dir, proxy := f.d.Servers[trust.Directory], f.d.Servers[trust.Proxy]
	var streams atomic.Int64
	atk, err := fabric.New(fabric.Config{Component: "attacker", Identity: f.agentIDs[f.L2.ID], Policy: fabric.NewAllowList(dir.Key, proxy.Key)})
	if err != nil {
		t.Fatal(err)
	}
	defer atk.Close()
	atk.AddAddrs(dir.Key, dir.Addrs...)
	atk.AddAddrs(proxy.Key, proxy.Addrs...)
	atk.HandleStream(agentapi.MethodInferenceHTTP, func(context.Context, *fabric.StreamRequest) error {
		streams.Add(1)
		return fabric.Errorf(fabric.CodeUnavailable, "captured")
	})
	if err := atk.Call(ctx, proxy.Key, fabric.MethodPing, nil, nil); err != nil {
		t.Fatalf("the attacker's key reaches proxy-inference as an agent's does: %v", err)
	}
	meta, _ := json.Marshal(agentapi.InferenceMeta{JobID: f.L.ID, Replica: 0, Role: agentapi.PlacementHead, Model: "matrix-l", Ready: true})
	err = atk.Announce(ctx, fabric.AnnounceParams{Topic: agentapi.InferenceTopic(f.L.ID), TTLSeconds: 600, Meta: meta}, dir.Key)
	if fabric.ErrorCode(err) != fabric.CodeForbidden {
		t.Fatalf("another job's agent announcing as job %s's head: %v, want forbidden", f.L.ID, err)
	}
	// It announces its own job's topic, claiming L in its meta: not L's
	// topic, so not L's replica either.
	if err := atk.Announce(ctx, fabric.AnnounceParams{Topic: agentapi.InferenceTopic(f.L2.ID), TTLSeconds: 60, Meta: meta}, dir.Key); err != nil {
		t.Fatalf("the attacker's own topic: %v", err)
	}
	body := `{"model":"matrix-l","messages":[{"role":"user","content":"my secret prompt"}],"max_tokens":4}`
	post := func() (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, infURL+"/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key.Key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, _ := post(); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			code, b := post()
			t.Fatalf("job %s never served its model: %d %s", f.L.ID, code, b)
		}
	}
	for i := range 20 {
		if code, b := post(); code != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, code, b)
		}
	}
	if n := streams.Load(); n != 0 {
		t.Fatalf("%d requests reached the attacker's key", n)
	}
}

// Flood sends n announcements of 4 KB on distinct topics with a 600 s TTL
// from the key of job K2's agent, 32 at a time, and returns how many the
// directory refused. None is its own job's topic, so the directory must
// refuse them all; a lookup of one finds nothing.
func (f *Fixture) Flood(ctx context.Context, t *testing.T, n int) (refused int) {
	t.Helper()
	dir := f.d.Servers[trust.Directory]
	atk, err := fabric.New(fabric.Config{Component: "flooder", Identity: f.agentIDs[f.K2.ID], Policy: fabric.NewAllowList(dir.Key)})
	if err != nil {
		t.Fatal(err)
	}
	defer atk.Close()
	atk.AddAddrs(dir.Key, dir.Addrs...)
	meta, _ := json.Marshal(strings.Repeat("x", 4090))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		other []error
	)
	work := make(chan int)
	for range 32 {
		wg.Go(func() {
			for i := range work {
				err := atk.Call(ctx, dir.Key, fabric.MethodAnnounce, fabric.AnnounceParams{Topic: fmt.Sprintf("flood/%d", i), TTLSeconds: 600, Meta: meta}, nil)
				mu.Lock()
				switch code := fabric.ErrorCode(err); {
				case code == fabric.CodeForbidden || code == fabric.CodeResourceExhausted:
					refused++
				case err != nil && len(other) < 5:
					other = append(other, err)
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	for _, err := range other {
		t.Errorf("a flooding announcement failed otherwise: %v", err)
	}
	ln, err := fabric.New(fabric.Config{Component: "matrix-lookup", Identity: f.d.Identities[trust.AppNode], Policy: fabric.NewAllowList(dir.Key)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ln.AddAddrs(dir.Key, dir.Addrs...)
	if peers, err := ln.Lookup(ctx, "flood/7", dir.Key); err != nil || len(peers) != 0 {
		t.Fatalf("a flooded topic: %v, %v; want no peers", peers, err)
	}
	return refused
}

// Revoke kills job K and waits until its agent's key is revoked where it
// was admitted: the agent's connections to the agents' directory and the
// app-node are closed and a new dial with its key is refused. It returns
// how long that took after the kill answered.
func (f *Fixture) Revoke(ctx context.Context, t *testing.T) time.Duration {
	t.Helper()
	n := f.kAgent.Node()
	dir, app := f.d.Servers[trust.Directory], f.d.Servers[trust.AppNode]
	for _, p := range []Peer{dir, app} {
		if !n.Connected(p.Key) {
			t.Fatalf("job %s's agent is not connected to %s before the kill", f.K.ID, p.Key.Short())
		}
	}
	if _, err := f.d.API.KillJob(ctx, f.K.ID); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for n.Connected(dir.Key) || n.Connected(app.Key) {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("the killed job's agent is still connected after %v", time.Since(start))
		}
		time.Sleep(time.Millisecond)
	}
	took := time.Since(start)
	// Its announcement went with its key.
	ln, err := fabric.New(fabric.Config{Component: "matrix-lookup", Identity: f.d.Identities[trust.AppNode], Policy: fabric.NewAllowList(dir.Key)})
	if err != nil {
		t.Fatal(err)
	}
	ln.AddAddrs(dir.Key, dir.Addrs...)
	peers, err := ln.Lookup(ctx, agentapi.Topic(f.K.ID), dir.Key)
	ln.Close()
	if err != nil || slices.ContainsFunc(peers, func(p fabric.PeerInfo) bool { return p.Key == f.agentIDs[f.K.ID].PublicKey() }) {
		t.Fatalf("the directory still lists the killed job's agent: %v, %v", peers, err)
	}
	for _, p := range []Peer{dir, app} {
		probe, err := fabric.New(fabric.Config{Component: "matrix-revoked", Identity: f.agentIDs[f.K.ID], Policy: fabric.NewAllowList(p.Key)})
		if err != nil {
			t.Fatal(err)
		}
		probe.AddAddrs(p.Key, p.Addrs...)
		err = probe.Call(ctx, p.Key, fabric.MethodPing, nil, nil)
		probe.Close()
		if fabric.ErrorCode(err) != fabric.CodeRefused {
			t.Fatalf("the killed job's agent key on %s: %v, want refused", p.Key.Short(), err)
		}
	}
	return took
}
