package systest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/k8stest"
)

// TestStoppingEachComponentLeavesNoGoroutine runs each component of the
// platform alone, in-process, as `cosmicac COMPONENT` would (its peers are
// keys at addresses nobody answers, so its dial and retry loops are in
// flight), waits until it says it is up, stops it as SIGINT does (the
// command's context is cancelled) and checks that no goroutine it started
// outlives it: every goroutine has an owner that waits for it.
// (TestStopLeavesNoGoroutine in cosmictest does the same for the whole
// platform with jobs, agents and a shell running.)
func TestStoppingEachComponentLeavesNoGoroutine(t *testing.T) {
	key := func() string {
		id, err := fabric.GenerateIdentity()
		if err != nil {
			t.Fatal(err)
		}
		return id.PublicKey().String()
	}
	nobody := func() string { return key() + "@" + freePort(t) } // a peer that never answers
	// The instance agent is up once it reaches a peer: its worker is a
	// node here that admits it; its monitor never answers.
	agentID, err := fabric.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	agentKeyFile := filepath.Join(t.TempDir(), "agent.key")
	if err := fabric.WriteIdentityFile(agentKeyFile, agentID); err != nil {
		t.Fatal(err)
	}
	workerID, _ := fabric.GenerateIdentity()
	wn, err := fabric.New(fabric.Config{Component: "wrk-test", Identity: workerID, Listen: "127.0.0.1:0", Policy: fabric.NewAllowList(agentID.PublicKey())})
	if err != nil {
		t.Fatal(err)
	}
	defer wn.Close()
	agentConfig := func(extra string) string {
		p := filepath.Join(t.TempDir(), "agent.yaml")
		mon := strings.SplitN(nobody(), "@", 2)
		body := fmt.Sprintf("jobId: 0b7c54a8-5f0e-4c1e-9d3a-2f6b8e1c4d70\nreplica: 0\nvmiIndex: 0\nidentityFile: %s\nlisten: 127.0.0.1:0\n"+
			"peers:\n- {role: worker, key: %s, addrs: [%s]}\n- {role: monitor, key: %s, addrs: [%s]}\n%s",
			agentKeyFile, workerID.PublicKey(), wn.Addr(), mon[0], mon[1], extra)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	type component struct {
		name  string
		args  []string
		ready string // the first word of the line it prints once up
		// ignore names goroutines of a library that end on their own
		// after the component has stopped.
		ignore []goleak.Option
	}
	components := []component{
		{"wrk-ork", []string{"wrk-ork", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--app-node-key", key(), "--metrics-listen", "127.0.0.1:0"}, "fabric", nil},
		{"app-node", []string{"app-node", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--ork", nobody(), "--api-listen", "127.0.0.1:0",
			"--metrics-listen", "127.0.0.1:0"}, "api", nil},
		{"wrk-server-sim", []string{"wrk-server-sim", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--ork", nobody(), "--monitor", nobody(),
			"--rack", "r1", "--location", "eu"}, "fabric", nil},
		{"wrk-monitor", []string{"wrk-monitor", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--ork", nobody(), "--http-listen", "127.0.0.1:0",
			"--app-node-url", "http://" + freePort(t)}, "monitor", nil},
		{"wrk-directory", []string{"wrk-directory", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--ork", nobody(), "--metrics-listen", "127.0.0.1:0"}, "fabric", nil},
		{"proxy-inference", []string{"proxy-inference", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--ork", nobody(), "--directory", nobody(),
			"--app-node", nobody(), "--http-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"}, "inference", nil},
		{"gateway", []string{"gateway", "--listen", "127.0.0.1:0", "--app-node", "http://" + freePort(t), "--inference", "http://" + freePort(t),
			"--monitor", "http://" + freePort(t)}, "gateway",
			// certmagic's lock keeper polls its released lock file every 5 s
			// before it returns (certmagic v0.25.6 filestorage.go:337-357):
			// it outlives Caddy's stop by up to 5 s, then ends.
			[]goleak.Option{goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.keepLockfileFresh")}},
		{"agent instance", []string{"agent", "instance", "--config", agentConfig(""), "--metrics-listen", "127.0.0.1:0"}, "agent", nil},
		{"agent inference", []string{"agent", "inference", "--simulated", "--config", agentConfig("inference: {runtime: vllm, model: facebook/opt-125m}\n"),
			"--metrics-listen", "127.0.0.1:0"}, "inference", nil},
	}
	// The Kubernetes worker, on a real kube-apiserver, stopped once its
	// informers have synced. (Stopped before, controller-runtime v0.25.2
	// leaves two goroutines per watched kind behind, waiting forever for a
	// sync that will not come: pkg/cache/multi_namespace_cache.go:335 and
	// :355. A process that exits loses them; see docs/k8s-worker.md.)
	kube := k8stest.Start(t)
	components = append(components, component{"wrk-server-k8s-nvidia", []string{"wrk-server-k8s-nvidia", "--data-dir", t.TempDir(),
		"--listen", "127.0.0.1:0", "--ork", nobody(), "--monitor", nobody(), "--kubeconfig", kube.Kubeconfig, "--metrics-listen", "127.0.0.1:0"}, "synced", nil})
	for _, c := range components {
		t.Run(c.name, func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			stopped := runComponent(t, c.args, c.ready)
			if code := stopped(); code != cli.ExitOK && code != cli.ExitInterrupted {
				t.Fatalf("%s stopped with exit code %d", c.name, code)
			}
			// Connections closed at stop take a moment to wind down: goleak
			// retries for a while before it reports.
			if err := goleak.Find(append([]goleak.Option{ignore}, c.ignore...)...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// runComponent runs `cosmicac ARGS...` in-process until it prints a line
// starting with ready, and returns a function that stops it (cancels its
// context, as SIGINT does) and returns its exit code.
func runComponent(t *testing.T, args []string, ready string) (stop func() int) {
	t.Helper()
	pr, pw := io.Pipe()
	a := &cli.App{Stdin: strings.NewReader(""), Stdout: pw, Stderr: testWriter{t}, Getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() {
		c := a.Run(ctx, args)
		pw.Close()
		code <- c
	}()
	up := make(chan struct{})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(pr)
		var once sync.Once
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) > 0 && f[0] == ready {
				once.Do(func() { close(up) })
			}
		}
	}()
	select {
	case <-up:
	case c := <-code:
		cancel()
		t.Fatalf("%s exited with code %d before it was up", strings.Join(args, " "), c)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("%s did not say %q within a minute", strings.Join(args, " "), ready)
	}
	return func() int {
		cancel()
		select {
		case c := <-code:
			<-drained
			return c
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not stop within 30 s of its context's cancellation", strings.Join(args, " "))
			return -1
		}
	}
}

// testWriter sends a component's log to the test's.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
