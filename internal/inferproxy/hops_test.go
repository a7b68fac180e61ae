package inferproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferagent"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// The benchmark's CosmicAC path in the shape it is deployed: the proxy in
// a process of its own and the agent in another (in production they are on
// different machines, the agent inside the VM), as nginx runs in a process
// of its own; the client and the runtime stay in the test process for
// every path. The test binary runs itself as each hop (hopEnv names the
// role); its configuration comes as one JSON line on stdin, and it runs
// until stdin closes.

// hopEnv names the role a test binary runs as instead of its tests.
const hopEnv = "COSMICAC_BENCH_HOP"

func TestMain(m *testing.M) {
	var err error
	switch role := os.Getenv(hopEnv); role {
	case "":
		os.Exit(m.Run())
	case "proxy":
		err = runProxyHop()
	case "agent":
		err = runAgentHop()
	default:
		err = fmt.Errorf("%s=%s: want proxy or agent", hopEnv, role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench hop %s: %v\n", os.Getenv(hopEnv), err)
		os.Exit(1)
	}
	os.Exit(0)
}

// hopConfig is what a hop process is told on stdin.
type hopConfig struct {
	AgentKey  string  `json:"agentKey,omitempty"`  // to the proxy: the agent it admits
	AgentSeed string  `json:"agentSeed,omitempty"` // to the agent: its identity
	Runtime   string  `json:"runtime,omitempty"`   // to the agent: the runtime's address
	Dir       hopPeer `json:"dir"`                 // to the agent
	Proxy     hopPeer `json:"proxy"`               // to the agent
}

// hopInfo is what the proxy process answers on stdout.
type hopInfo struct {
	URL    string  `json:"url"`
	APIKey string  `json:"apiKey"`
	Dir    hopPeer `json:"dir"`
	Proxy  hopPeer `json:"proxy"`
}

type hopPeer struct {
	Key  string `json:"key"`
	Addr string `json:"addr"`
}

// The benchmark's job, as both hop processes know it.
const (
	benchJob   = "job-bench"
	benchTeam  = "team-a"
	benchModel = "m"
)

func benchInference() cosmic.InferenceSpec {
	auth := true
	return cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-8B", ServedModelName: benchModel, RequireAuth: &auth}
}

// readHopConfig reads the configuration line from stdin and returns the
// reader of the rest, which ends when the benchmark closes stdin.
func readHopConfig() (hopConfig, io.Reader, error) {
	br := bufio.NewReader(os.Stdin)
	line, err := br.ReadBytes('\n')
	var cfg hopConfig
	if err == nil {
		err = json.Unmarshal(line, &cfg)
	}
	return cfg, br, err
}

// runProxyHop runs proxy-inference, with the directory (the ork's part;
// idle while the benchmark runs), a store holding the team's API key, and a
// catalog of the benchmark's model, then answers hopInfo.
func runProxyHop() error {
	cfg, rest, err := readHopConfig()
	if err != nil {
		return err
	}
	agentKey, err := fabric.ParsePublicKey(cfg.AgentKey)
	if err != nil {
		return err
	}
	node := func(name string, policy fabric.Policy) (*fabric.Node, error) {
		id, err := fabric.GenerateIdentity()
		if err != nil {
			return nil, err
		}
		return fabric.New(fabric.Config{Component: name, Identity: id, Listen: "127.0.0.1:0", Policy: policy})
	}
	dir, err := node("wrk-ork", fabric.PolicyFunc(func(fabric.PublicKey) fabric.Access { return fabric.AccessFull }))
	if err != nil {
		return err
	}
	defer dir.Close()
	fabric.NewDirectory(nil).Register(dir)
	ring := trust.NewKeyring()
	if err := ring.Add(trust.Directory, dir.PublicKey()); err != nil {
		return err
	}
	pnode, err := node("proxy-inference", trust.NewPolicy(trust.Proxy, ring))
	if err != nil {
		return err
	}
	defer pnode.Close()
	pnode.AddAddrs(dir.PublicKey(), dir.Addr())
	ring.BindAgents(orkapi.Placement{Job: benchJob, Team: benchTeam, Type: cosmic.TypeManagedInference, Rack: "r1"}, []fabric.PublicKey{agentKey})

	tmp, err := os.MkdirTemp("", "cosmicac-bench-proxy")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	st, err := sqlite.Open(filepath.Join(tmp, "db"))
	if err != nil {
		return err
	}
	defer st.Close()
	ctx := context.Background()
	if err := st.CreateTeam(ctx, cosmic.Team{Name: benchTeam}); err != nil {
		return err
	}
	k, secret, err := appnode.NewAPIKey("bench", benchTeam, "admin", time.Now())
	if err != nil {
		return err
	}
	if err := st.CreateAPIKey(ctx, k); err != nil {
		return err
	}
	in := benchInference()
	models := []Model{{Name: benchModel, JobID: benchJob, Team: benchTeam, RequireAuth: true, Runtime: in.Runtime, ModelID: in.Model, Created: time.Now()}}
	p, err := New(Config{MaxConcurrentPerKey: -1, RequestsPerMinute: -1}, Deps{Node: pnode, Directories: []fabric.PublicKey{dir.PublicKey()},
		Catalog: catalogFunc(func() []Model { return models }), Keys: st, Agents: ring})
	if err != nil {
		return err
	}
	defer p.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: p.Handler()}
	go srv.Serve(ln)
	defer srv.Close()
	if err := json.NewEncoder(os.Stdout).Encode(hopInfo{URL: "http://" + ln.Addr().String(), APIKey: secret,
		Dir:   hopPeer{Key: dir.PublicKey().String(), Addr: dir.Addr()},
		Proxy: hopPeer{Key: pnode.PublicKey().String(), Addr: pnode.Addr()}}); err != nil {
		return err
	}
	io.Copy(io.Discard, rest)
	return nil
}

// runAgentHop runs the job's inference agent in front of the runtime the
// benchmark runs.
func runAgentHop() error {
	cfg, rest, err := readHopConfig()
	if err != nil {
		return err
	}
	seed, err := hex.DecodeString(cfg.AgentSeed)
	if err != nil {
		return err
	}
	id, err := fabric.IdentityFromSeed(seed)
	if err != nil {
		return err
	}
	dirKey, err := fabric.ParsePublicKey(cfg.Dir.Key)
	if err != nil {
		return err
	}
	proxyKey, err := fabric.ParsePublicKey(cfg.Proxy.Key)
	if err != nil {
		return err
	}
	a := inferagent.New(inferagent.Config{HealthPoll: 10 * time.Millisecond, ProbeInterval: time.Second, AnnounceTTL: 3 * time.Second,
		JobID: benchJob, Team: benchTeam, Inference: benchInference(), Identity: id,
		Placement: inferagent.Placement{VMICount: 1, GPUs: 1},
		Launcher:  runtimeAt(cfg.Runtime),
		Peers: []inferagent.Peer{
			{Role: agentapi.RoleDirectory, Key: dirKey, Addrs: []string{cfg.Dir.Addr}},
			{Role: agentapi.RoleProxy, Key: proxyKey, Addrs: []string{cfg.Proxy.Addr}},
		}}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		io.Copy(io.Discard, rest)
		cancel()
	}()
	if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// startHops runs the proxy and the agent each in a process of its own in
// front of the runtime at runtimeAddr, and waits until a completion goes
// through them. It returns the proxy's base URL, the API key and the two
// processes' IDs.
func startHops(t *testing.T, runtimeAddr string) (url, key string, pids []int) {
	t.Helper()
	agentID, err := fabric.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	proxyOut := startHop(t, "proxy", hopConfig{AgentKey: agentID.PublicKey().String()}, &pids)
	line, err := bufio.NewReader(proxyOut).ReadBytes('\n')
	if err != nil {
		t.Fatalf("the proxy process answered nothing: %v", err)
	}
	var info hopInfo
	if err := json.Unmarshal(line, &info); err != nil {
		t.Fatalf("the proxy process answered %q: %v", line, err)
	}
	startHop(t, "agent", hopConfig{AgentSeed: hex.EncodeToString(agentID.Seed()), Runtime: runtimeAddr, Dir: info.Dir, Proxy: info.Proxy}, &pids)
	body := []byte(`{"model":"` + benchModel + `","prompt":"hello","max_tokens":1}`)
	waittest.NoError(t, func() error {
		req, _ := http.NewRequest("POST", info.URL+Prefix+"/completions", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+info.APIKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", resp.Status, b)
		}
		return nil
	}, "a completion through the proxy and agent processes")
	return info.URL + Prefix, info.APIKey, pids
}

// startHop starts the test binary as role with cfg and returns its stdout.
// The process ends when the test's cleanup closes its stdin.
func startHop(t *testing.T, role string, cfg hopConfig, pids *[]int) io.Reader {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), hopEnv+"="+role)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	if err := json.NewEncoder(stdin).Encode(cfg); err != nil {
		t.Fatal(err)
	}
	*pids = append(*pids, cmd.Process.Pid)
	return stdout
}
