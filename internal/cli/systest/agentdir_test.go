package systest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/waittest"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// agentKeyWorker is a rack worker that, like the Kubernetes worker,
// issues one agent key per replica and reports it (AgentKeys); its
// replicas run at once.
type agentKeyWorker struct {
	rack string
	rep  *worker.ReporterClient
	key  fabric.PublicKey // the agent key it reports

	mu   sync.Mutex
	jobs map[string]worker.ReplicaReport
}

func (w *agentKeyWorker) Capacity(context.Context) (worker.Capacity, error) {
	return worker.Capacity{Rack: w.rack, ObservedAt: time.Now(), Nodes: []cosmic.Node{
		{Name: "n0", Rack: w.rack, GPUModel: "GH100_H100_SXM5_80GB", GPUs: 8, Schedulable: true, Ready: true}}}, nil
}

func (w *agentKeyWorker) set(job string, rr worker.ReplicaReport) {
	w.mu.Lock()
	w.jobs[job] = rr
	w.mu.Unlock()
	go w.rep.Report(context.Background(), worker.Report{Rack: w.rack, Jobs: []worker.JobReport{{JobID: job, Replicas: []worker.ReplicaReport{rr}}}})
}

func (w *agentKeyWorker) Apply(_ context.Context, p worker.ApplyParams) error {
	for _, r := range p.Reservations {
		w.set(p.Job.ID, worker.ReplicaReport{Replica: r.Replica, State: cosmic.StateRunning, Nodes: []string{"n0"}, AgentKeys: []string{w.key.String()}})
	}
	return nil
}

func (w *agentKeyWorker) Stop(_ context.Context, r worker.ReplicaRef) error {
	k := cosmic.NewReason(cosmic.ReasonKilled, "")
	w.set(r.JobID, worker.ReplicaReport{Replica: 0, State: cosmic.StateStopped, Reason: &k})
	return nil
}

func (w *agentKeyWorker) Restart(context.Context, worker.ReplicaRef) error { return nil }

func (w *agentKeyWorker) Delete(_ context.Context, p worker.DeleteParams) error {
	w.set(p.JobID, worker.ReplicaReport{Replica: 0, State: cosmic.StateStopped, Gone: true})
	return nil
}

func (w *agentKeyWorker) DeleteVolume(context.Context, worker.VolumeRef) error { return nil }

func (w *agentKeyWorker) Jobs(context.Context) ([]worker.JobReport, error) {
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

// canReach reports whether id's key is admitted by the node at peer.
func canReach(ctx context.Context, t *testing.T, id *fabric.Identity, peer string) error {
	t.Helper()
	k, addrs, err := fabric.ParsePeer(peer)
	if err != nil {
		t.Fatal(err)
	}
	n, err := fabric.New(fabric.Config{Component: "probe", Identity: id, Policy: fabric.NewAllowList(k)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	n.AddAddrs(k, addrs...)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return n.Call(cctx, k, fabric.MethodPing, nil, nil)
}

// TestAgentDirectoryAsProcesses runs wrk-ork, wrk-directory and the
// app-node as processes, with a rack worker that reports its agents' keys
// (as the Kubernetes worker does) and that job's agent in this process: the
// directory and the app-node admit the agent's key (full, read-only) only
// while the ork lists it, a shell reaches the agent through the app-node,
// and any other key is refused.
func TestAgentDirectoryAsProcesses(t *testing.T) {
	old := agent.ReconnectInterval
	agent.ReconnectInterval = 200 * time.Millisecond
	t.Cleanup(func() { agent.ReconnectInterval = old })

	base := t.TempDir()
	dirs, keys := identities(t, base, "ork", "app", "dir")
	ork := component(t, []string{"fabric"}, "wrk-ork", "--data-dir", dirs["ork"], "--listen", "127.0.0.1:0",
		"--app-node-key", keys["app"].String(), "--directory-key", keys["dir"].String(), "--heartbeat", "50ms")["fabric"]
	dir := component(t, []string{"fabric"}, "wrk-directory", "--data-dir", dirs["dir"], "--listen", "127.0.0.1:0",
		"--ork", ork, "--app-node-key", keys["app"].String())["fabric"]
	appOut := component(t, []string{"fabric", "api"}, "app-node", "--data-dir", dirs["app"], "--listen", "127.0.0.1:0",
		"--ork", ork, "--api-listen", "127.0.0.1:0", "--directory", dir)
	app, api := appOut["fabric"], appOut["api"]
	tok, err := os.ReadFile(filepath.Join(dirs["app"], "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tok))
	baseURL := strings.TrimSuffix(api, "/api/v1")
	c := client.New(baseURL, token)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The rack worker, in this process.
	orkKey, orkAddrs, _ := fabric.ParsePeer(ork)
	wid, _ := fabric.GenerateIdentity()
	agentID, _ := fabric.GenerateIdentity()
	wn, err := fabric.New(fabric.Config{Component: "wrk-test", Identity: wid, Listen: "127.0.0.1:0", Policy: fabric.NewAllowList(orkKey)})
	if err != nil {
		t.Fatal(err)
	}
	defer wn.Close()
	wn.AddAddrs(orkKey, orkAddrs...)
	w := &agentKeyWorker{rack: "k1", rep: worker.NewReporterClient(wn, orkKey), key: agentID.PublicKey(), jobs: map[string]worker.ReplicaReport{}}
	worker.Serve(wn, w)
	if _, err := c.RegisterRack(ctx, apiv1.RegisterRack{ID: "k1", Location: "eu", GPUModel: "GH100_H100_SXM5_80GB",
		WorkerKey: wid.PublicKey().String(), WorkerAddrs: []string{wn.Addr()}}); err != nil {
		t.Fatal(err)
	}

	// Before any job lists it, the agent's key is refused everywhere.
	if err := canReach(ctx, t, agentID, dir); fabric.ErrorCode(err) != fabric.CodeRefused {
		t.Fatalf("agent key on the directory before its job: %v, want refused", err)
	}
	j, err := c.CreateJob(ctx, cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: "s", Location: "eu", Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if j, err = c.WaitJob(ctx, j.ID, client.Settled, nil); err != nil || j.Status.State != cosmic.StateRunning {
		t.Fatalf("job: %s (%v)", j.Status.State, err)
	}

	// The job's agent, as its VM would run it: it dials the directory and
	// the app-node, which now admit it.
	peer := func(role, s string) agent.Peer {
		k, addrs, _ := fabric.ParsePeer(s)
		return agent.Peer{Role: role, Key: k, Addrs: addrs}
	}
	ag := agent.New(agent.Config{JobID: j.ID, Team: j.Team, Identity: agentID, Shell: "/bin/sh", WorkDir: t.TempDir(),
		Peers: []agent.Peer{peer(agentapi.RoleDirectory, dir), peer(agentapi.RoleAppNode, app)}}, nil)
	actx, acancel := context.WithCancel(ctx)
	adone := make(chan error, 1)
	go func() { adone <- ag.Run(actx) }()
	defer func() { acancel(); <-adone }()

	// A shell through the app-node reaches it.
	dialer := agentapi.HTTPShellDialer{BaseURL: baseURL, Token: token}
	waittest.NoError(t, func() error {
		conn, _, err := dialer.DialShell(ctx, j.ID, shellproto.OpenParams{Argv: []string{"echo", "hello-from-the-vm"}})
		if err != nil {
			return err
		}
		var out bytes.Buffer
		st, err := agentapi.RunSession(ctx, conn, agentapi.SessionIO{Stdout: &out})
		if err != nil {
			return err
		}
		if st.Code != 0 || !strings.Contains(out.String(), "hello-from-the-vm") {
			return fmt.Errorf("exit %+v, output %q", st, out.String())
		}
		return nil
	}, "a shell through the app-node")

	// Any other key is refused by both, even announcing the job's topic.
	rogue, _ := fabric.GenerateIdentity()
	for name, p := range map[string]string{"directory": dir, "app-node": app} {
		if err := canReach(ctx, t, rogue, p); fabric.ErrorCode(err) != fabric.CodeRefused {
			t.Fatalf("a key no job lists, on the %s: %v, want refused", name, err)
		}
	}

	// The job stops: its agent's key is no longer admitted.
	if _, err := c.KillJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	waittest.NoError(t, func() error {
		for name, p := range map[string]string{"directory": dir, "app-node": app} {
			if err := canReach(ctx, t, agentID, p); fabric.ErrorCode(err) != fabric.CodeRefused {
				return fmt.Errorf("%s: %v", name, err)
			}
		}
		return nil
	}, "the stopped job's agent refused")
}
