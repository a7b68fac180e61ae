// Package cosmictest is the whole-system test harness: NewEnv starts every
// component in-process (each on its own fabric node, talking over the
// fabric, as `cosmicac up` does) and hands the test the public HTTP client,
// so tests drive the platform as a user would. Faults are injected over the
// fabric with the simulated rack's methods, as an operator would with
// `cosmicac rpc`.
//
// Importers: tests only.
package cosmictest

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/s3test"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// Env is one running platform and a client of it.
type Env struct {
	T        testing.TB
	Ctx      context.Context
	DataDir  string
	Config   platform.Config
	P        *platform.Platform
	Client   *client.Client
	operator *fabric.Node
}

// Option changes the platform's config before it starts.
type Option func(*platform.Config)

// Sim sets the simulated rack's shape.
func Sim(nodes, gpusPerNode int) Option {
	return func(c *platform.Config) { c.Sim.Nodes, c.Sim.GPUsPerNode = nodes, gpusPerNode }
}

// NewEnv starts a platform on a temporary data directory with a fast
// simulated rack (2 nodes × 8 GPUs, 5ms steps) and a 50ms heartbeat.
func NewEnv(t testing.TB, opts ...Option) *Env {
	t.Helper()
	dir := t.TempDir()
	return newEnvAt(t, dir, 5*time.Minute, opts...)
}

// NewEnvWithin is NewEnv for a run with no deadline of its own (a
// benchmark) that may take up to d (real VMs).
func NewEnvWithin(t testing.TB, d time.Duration, opts ...Option) *Env {
	t.Helper()
	return newEnvAt(t, t.TempDir(), d, opts...)
}

// cleanupMargin is what envContext leaves of a test binary's deadline for
// the test to fail with what it waited for, and to clean up (VMs stopped,
// consoles printed), before go test's own timeout panics.
const cleanupMargin = time.Minute

// envContext is the platform's context. It is a bound on a test's failure
// only, so it is the test binary's own (go test -timeout, less
// cleanupMargin) where there is one: a fixed bound per test fails a test
// that is merely slow, as a real VM's boots are on a loaded machine (a CI
// run beside a CPU-heavy process took 16 minutes for what takes 5), while
// each step a test waits on has its bound and names it. Without a
// deadline (a benchmark, -timeout 0) the bound is within.
func envContext(t testing.TB, within time.Duration) (context.Context, context.CancelFunc) {
	if dt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if d, ok := dt.Deadline(); ok {
			return context.WithDeadline(context.Background(), d.Add(-cleanupMargin))
		}
	}
	return context.WithTimeout(context.Background(), within)
}

func newEnvAt(t testing.TB, dir string, within time.Duration, opts ...Option) *Env {
	t.Helper()
	ctx, cancel := envContext(t, within)
	t.Cleanup(cancel)
	opID, err := fabric.LoadOrCreateIdentity(filepath.Join(dir, "operator"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := platform.DefaultConfig(dir)
	cfg.Listen = "127.0.0.1:0"
	cfg.MetricsListen = "127.0.0.1:0"
	cfg.Sim.Step = config.Duration(5 * time.Millisecond)
	cfg.Ork.Heartbeat = config.Duration(50 * time.Millisecond)
	cfg.Ork.WorkerTimeout = config.Duration(2 * time.Second)
	cfg.OperatorKeys = []fabric.PublicKey{opID.PublicKey()}
	for _, o := range opts {
		o(&cfg)
	}
	p, err := platform.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start platform: %v", err)
	}
	e := &Env{T: t, Ctx: ctx, DataDir: dir, Config: cfg, P: p}
	t.Cleanup(func() { e.Stop() })
	tok, err := p.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	e.Client = client.New(p.URL, tok, client.WithPollInterval(10*time.Millisecond))
	if e.operator, err = fabric.New(fabric.Config{Component: "operator", Identity: opID,
		Policy: fabric.NewAllowList(p.WorkerNode().PublicKey(), p.OrkNode.PublicKey())}); err != nil {
		t.Fatal(err)
	}
	return e
}

// Stop stops the platform (idempotent).
func (e *Env) Stop() {
	if e.operator != nil {
		e.operator.Close()
		e.operator = nil
	}
	if e.P != nil {
		e.P.Close()
		e.P = nil
	}
}

// Restart stops the platform and starts a new one on the same data.
func (e *Env) Restart() {
	e.T.Helper()
	e.Stop()
	n := newEnvAt(e.T, e.DataDir, 5*time.Minute, func(c *platform.Config) { *c = withFresh(e.Config, c) })
	*e = *n
}

// withFresh keeps the test's shape but the new run's operator key.
func withFresh(old platform.Config, cur *platform.Config) platform.Config {
	out := old
	out.OperatorKeys = cur.OperatorKeys
	out.Logger = cur.Logger
	return out
}

// AddUser makes a user with role in team (made if new) in the platform's
// store, and returns a token of it.
func (e *Env) AddUser(name, team string, role cosmic.Role) string {
	e.T.Helper()
	return appnodetest.AddUser(e.T, e.P.Store, name, team, role)
}

// Create creates a job and fails the test on error.
func (e *Env) Create(spec cosmic.Spec) cosmic.Job {
	e.T.Helper()
	j, err := e.Client.CreateJob(e.Ctx, spec)
	if err != nil {
		e.T.Fatalf("create job: %v", err)
	}
	return j
}

// Container is a gpu-container spec in the simulated rack's location.
func Container(name string, gpus int) cosmic.Spec {
	return cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: name, Location: "us", Image: "ubuntu:24.04",
		Resources: cosmic.Resources{GPU: gpus}}
}

// VLLM is a managed-inference vLLM spec.
func VLLM(name string, replicas, gpusPerReplica int) cosmic.Spec {
	return cosmic.Spec{Type: cosmic.TypeManagedInference, Name: name, Location: "us",
		Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-32B", Replicas: replicas, GPUsPerReplica: gpusPerReplica}}
}

// WaitState polls the job until it is in one of states; the test fails
// after 30s, printing the job's history.
func (e *Env) WaitState(id string, states ...cosmic.State) cosmic.Job {
	e.T.Helper()
	return e.WaitStateWithin(id, 30*time.Second, states...)
}

// WaitStateWithin is WaitState failing after d.
func (e *Env) WaitStateWithin(id string, d time.Duration, states ...cosmic.State) cosmic.Job {
	e.T.Helper()
	var j cosmic.Job
	var err error
	if waittest.Poll(d, func() bool {
		j, err = e.Client.GetJob(e.Ctx, id)
		return err == nil && slices.Contains(states, j.Status.State)
	}) {
		return j
	}
	b, _ := json.MarshalIndent(j.Status, "", "  ")
	e.T.Fatalf("job %s never reached %v (last err %v); status:\n%s", id, states, err, b)
	return j
}

// WaitGone waits until the job's record is gone (its delete confirmed);
// the test fails after 30s.
func (e *Env) WaitGone(id string) {
	e.T.Helper()
	waittest.Within(e.T, 30*time.Second, func() bool {
		_, err := e.Client.GetJob(e.Ctx, id)
		return errors.Is(err, cosmic.ErrNotFound)
	}, "job %s to be gone", id)
}

// Fault calls a fault-injection method of the simulated rack over the
// fabric, as `cosmicac rpc` does.
func (e *Env) Fault(method string, params any) {
	e.T.Helper()
	sim := e.P.Sim
	e.operator.AddAddrs(sim.Node().PublicKey(), sim.Addr())
	if err := e.operator.Call(e.Ctx, sim.Node().PublicKey(), method, params, nil); err != nil {
		e.T.Fatalf("%s: %v", method, err)
	}
}

// FreeGPUs is the rack's free GPUs as the API reports them.
func (e *Env) FreeGPUs() int {
	e.T.Helper()
	racks, err := e.Client.ListRacks(e.Ctx)
	if err != nil || len(racks) == 0 {
		e.T.Fatalf("list racks: %v %v", racks, err)
	}
	return racks[0].FreeGPUs
}

// History lists the states a job went through.
func History(j cosmic.Job) []cosmic.State {
	var out []cosmic.State
	for _, h := range j.Status.History {
		if len(out) == 0 || out[len(out)-1] != h.State {
			out = append(out, h.State)
		}
	}
	return out
}

// AddDatastore registers srv, with its keys, as the admin's team's
// datastore alias.
func (e *Env) AddDatastore(srv *s3test.Server, alias string) {
	e.T.Helper()
	if _, err := e.Client.CreateDatastore(e.Ctx, apiv1.CreateDatastore{Alias: alias, Endpoint: srv.Endpoint, Region: srv.Region,
		Credentials: apiv1.DatastoreCredentials{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}}); err != nil {
		e.T.Fatal(err)
	}
}
