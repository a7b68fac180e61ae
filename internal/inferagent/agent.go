package inferagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/backoff"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/datasync"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/version"
	"github.com/cosmicac/cosmicac/internal/wav"
)

// Component is the agent's component name in pings.
const Component = string(trust.InferenceAgent)

// ReportInterval is how often the status is pushed without a change.
var ReportInterval = 10 * time.Second

// Agent is one inference agent.
type Agent struct {
	cfg Config
	log *slog.Logger
	cmd Command
	fwd *joblog.Forwarder // its records to the monitor (nil: Config.Logs)

	ready     chan struct{}
	readyOnce sync.Once
	// routable says the directories hold the agent's announcement as ready
	// (always true without directories): until then the proxy cannot route
	// to it, and the agent tells no one it is ready (published).
	routable  atomic.Bool
	kick      chan struct{}
	crashed   chan struct{}
	crashOnce sync.Once

	mu   sync.Mutex
	node *fabric.Node
	st   agentapi.InferenceStatus
	addr string // the runtime's host:port while it runs

	hc *http.Client
	// spare is llama.cpp's connection to the runtime dialed ahead of the
	// next exchange (spare.go).
	spare spare
	// probeAddrs are the local addresses of hc's open connections.
	probeAddrs sync.Map
}

// New makes an agent; Run runs it.
func New(cfg Config, log *slog.Logger) *Agent {
	cfg.setDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{log: log, ready: make(chan struct{}), kick: make(chan struct{}, 1), crashed: make(chan struct{})}
	if cfg.Logs == nil {
		cfg.Logs = joblog.Discard
		if a.fwd = agent.MonitorForwarder(cfg.Peers, a.Node); a.fwd != nil {
			cfg.Logs = a.fwd
		}
	}
	a.cfg = cfg
	a.st.InferenceMeta = agentapi.InferenceMeta{JobID: cfg.JobID, Team: cfg.Team, Replica: cfg.Replica, VMIIndex: cfg.Placement.VMIIndex,
		Role: cfg.Placement.Role(), Model: cfg.Inference.ServedName(), Runtime: string(cfg.Inference.Runtime), Error: "starting"}
	if a.st.Runtime == "" {
		a.st.Runtime = string(cosmic.RuntimeVLLM)
	}
	a.st.Version = version.Version
	if cfg.Identity != nil {
		a.st.Key = cfg.Identity.PublicKey().String()
	}
	// The probes have a transport of their own: a probe's cancelled context
	// must never race a proxied request for a pooled connection.
	a.hc = &http.Client{Transport: &http.Transport{DialContext: a.dialProbe, MaxIdleConnsPerHost: 2}}
	return a
}

// dialProbe dials the runtime for the agent's own health checks and
// probes, remembering each connection's local address while it is open:
// the runtime's access log names it, and those lines are the agent's, not
// the job's output (probeLine).
func (a *Agent) dialProbe(ctx context.Context, network, addr string) (net.Conn, error) {
	if addr == socketHost+":80" {
		addr = a.runtimeAddr()
	}
	c, err := dialRuntime(ctx, addr)
	if err != nil {
		return nil, err
	}
	local := c.LocalAddr().String()
	a.probeAddrs.Store(local, true)
	return &probeConn{Conn: c, forget: func() { a.probeAddrs.Delete(local) }}, nil
}

// probeConn forgets its address once closed.
type probeConn struct {
	net.Conn
	once   sync.Once
	forget func()
}

func (c *probeConn) Close() error {
	c.once.Do(c.forget)
	return c.Conn.Close()
}

// probeLine says whether line is the runtime's access log line of one of
// the agent's own requests. vLLM's server is uvicorn, whose access log
// line is `%s - "%s %s HTTP/%s" %d` with the client's host:port first
// (uvicorn/protocols/http/h11_impl.py and httptools_impl.py,
// access_logger.info), after the level ("INFO:     ").
func (a *Agent) probeLine(line string) bool {
	i := strings.Index(line, ` - "`)
	if i < 0 {
		return false
	}
	client := line[:i]
	if j := strings.LastIndexByte(client, ' '); j >= 0 {
		client = client[j+1:]
	}
	_, ok := a.probeAddrs.Load(client)
	return ok
}

// Forwarder is the forwarder of the agent's records to its monitor, nil
// unless the agent made one (Config.Logs), for its metrics.
func (a *Agent) Forwarder() *joblog.Forwarder { return a.fwd }

// Ready is closed the first time the agent is ready and announced so
// (published).
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Node is the agent's fabric node once Run has started it.
func (a *Agent) Node() *fabric.Node {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.node
}

// Status returns the agent's status now.
func (a *Agent) Status() agentapi.InferenceStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st
}

func (a *Agent) runtimeAddr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.addr
}

// Crash stops the agent as a dying VMI would: connections are cut, the
// runtime is killed and nothing is withdrawn from the directories (the
// announcement expires). Run then returns.
func (a *Agent) Crash() { a.crashOnce.Do(func() { close(a.crashed) }) }

// update changes the status under the lock and tells everyone.
func (a *Agent) update(f func(st *agentapi.InferenceStatus)) {
	a.mu.Lock()
	before := a.st
	f(&a.st)
	st := a.st
	a.mu.Unlock()
	if st.Ready != before.Ready || st.Error != before.Error || st.RuntimeRestarts != before.RuntimeRestarts {
		a.kickAnnounce()
		if a.cfg.OnChange != nil {
			a.cfg.OnChange(st)
		}
		a.publish()
	}
}

// published is the status the agent tells its workers (reports, and
// agentapi.MethodInferenceStatus): ready only once the runtime is ready and the directories
// announce it so, for a replica is running ("Active": its endpoint accepts
// requests) only once proxy-inference can find it. It closes Ready the
// first time it is ready, and sends the report.
func (a *Agent) published() agentapi.InferenceStatus {
	st := a.Status()
	if st.Ready && !a.routable.Load() {
		st.Ready, st.Error = false, "not announced to the directory yet"
	}
	if st.Ready {
		a.readyOnce.Do(func() { close(a.ready) })
	}
	return st
}

// publish sends the published status to the workers.
func (a *Agent) publish() { a.report(a.published()) }

func (a *Agent) report(st agentapi.InferenceStatus) {
	if n := a.Node(); n != nil {
		agent.NotifyWorkers(n, a.cfg.Peers, agentapi.MethodInferenceReport, st, a.log)
	}
}

// record writes a system record of the job.
func (a *Agent) record(step string, ok bool, format string, args ...any) {
	a.cfg.Logs.Emit(joblog.Record{Time: time.Now(), JobID: a.cfg.JobID, Team: a.cfg.Team, Replica: a.cfg.Replica,
		Source: joblog.SourceSystem, Stream: Component, Step: step, OK: joblog.Bool(ok), Line: fmt.Sprintf(format, args...)})
}

// Run serves until ctx ends (or Crash); then it stops the runtime, withdraws
// its announcement and closes its node.
func (a *Agent) Run(ctx context.Context) error {
	cfg := a.cfg
	if cfg.Identity == nil {
		return errors.New("inference agent: config has no identity")
	}
	if cfg.JobID == "" {
		return errors.New("inference agent: config has no job ID")
	}
	cmd, err := BuildCommand(cfg.Inference, cfg.Placement)
	if err != nil {
		return fmt.Errorf("inference agent: %w", err)
	}
	a.cmd = cmd
	n, err := agent.NewNode(trust.InferenceAgent, cfg.Identity, cfg.Listen, cfg.Peers, a.log)
	if err != nil {
		return err
	}
	n.HandleStream(agentapi.MethodInferenceHTTP, a.openRelay)
	fabric.HandleFunc(n, agentapi.MethodInferenceStatus, func(context.Context, fabric.PublicKey, struct{}) (agentapi.InferenceStatus, error) {
		return a.published(), nil
	}, fabric.ReadOnly())
	a.mu.Lock()
	a.node = n
	a.st.StartedAt = time.Now()
	a.st.Command = cmd.String()
	a.mu.Unlock()
	a.log.Info("inference agent serving", "job_id", cfg.JobID, "replica", cfg.Replica, "vmi_index", cfg.Placement.VMIIndex, "role", cfg.Placement.Role(), "key", n.PublicKey().String())

	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	dial, dirs := agent.PeerKeys(cfg.Peers)
	if len(dirs) == 0 {
		a.routable.Store(true) // no directory to wait for
	}
	wg.Go(func() { agent.KeepConnected(rctx, n, dial, a.log, agent.ConnectHooks{Dialled: a.kickAnnounce}) })
	if a.fwd != nil {
		wg.Go(func() { a.fwd.Run(rctx) })
	}
	announced := make(chan struct{})
	wg.Go(func() {
		defer close(announced)
		a.announce(rctx, n, dirs)
	})
	wg.Go(func() { agent.KeepReporting(rctx, ReportInterval, a.publish) })
	supervised := make(chan struct{})
	go func() {
		defer close(supervised)
		a.supervise(rctx, n)
	}()

	crashed := false
	select {
	case <-ctx.Done():
	case <-a.crashed:
		crashed = true
	}
	if crashed {
		n.Close() // cut every connection first, like a dead VMI
	}
	cancel()
	<-supervised
	<-announced
	n.Close()
	wg.Wait()
	a.spare.close()
	return nil
}

// supervise starts the runtime, probes it, and restarts it when it exits.
// A model from a datastore is taken into the node's cache first.
func (a *Agent) supervise(ctx context.Context, n *fabric.Node) {
	cmd, pl := a.cmd, a.cfg.Placement
	if a.cfg.Inference.ModelSource != nil && pl.ModelPath == "" {
		path, entry, err := a.fetchModel(ctx, n)
		if err != nil {
			return // ctx ended
		}
		// While the replica runs, its entry stays the cache's most
		// recently used: the garbage collection never takes it from
		// under a runtime that may restart on it.
		kept := make(chan struct{})
		go func() { defer close(kept); datasync.KeepUsed(ctx, entry) }()
		defer func() { <-kept }()
		pl.ModelPath = path
		if cmd, err = BuildCommand(a.cfg.Inference, pl); err != nil {
			a.record("runtime_start", false, "the runtime's command: %v", err)
			a.update(func(st *agentapi.InferenceStatus) { st.Ready, st.Error = false, err.Error() })
			return
		}
		a.mu.Lock()
		a.st.Command = cmd.String()
		a.mu.Unlock()
	}
	restart := backoff.Backoff{Min: a.cfg.RestartBackoff, Max: max(30*time.Second, a.cfg.RestartBackoff)}
	for ctx.Err() == nil {
		started := time.Now()
		stdout := &lineWriter{emit: a.appLine("stdout")}
		stderr := &lineWriter{emit: a.appLine("stderr")}
		env, files, err := a.runtimeEnv()
		var p Process
		if err == nil {
			p, err = a.cfg.Launcher.Start(ctx, Launch{Command: cmd, Inference: a.cfg.Inference, Placement: pl,
				Role: a.cfg.Placement.Role(), Env: env, Files: files, Stdout: stdout, Stderr: stderr})
		}
		if err != nil {
			a.record("runtime_start", false, "start the runtime: %v", err)
			a.update(func(st *agentapi.InferenceStatus) { st.Ready, st.Error = false, "start the runtime: "+err.Error() })
		} else {
			if sim, ok := a.cfg.Launcher.(interface{ Simulated() bool }); ok && sim.Simulated() {
				// No model server ran: the log must not say one started.
				a.record("runtime_start", true, "simulated runtime started: no model server runs here (a GPU node would run: %s)", cmd)
			} else {
				a.record("runtime_start", true, "runtime started: %s", cmd)
			}
			a.mu.Lock()
			a.addr = p.Addr()
			a.mu.Unlock()
			pctx, stopProbe := context.WithCancel(ctx)
			probed := make(chan struct{})
			go func() {
				defer close(probed)
				if a.cfg.Placement.Role() == agentapi.PlacementHead {
					a.probeLoop(pctx, p.Addr())
				} else {
					a.update(func(st *agentapi.InferenceStatus) { st.Ready, st.Error = true, "" })
				}
			}()
			select {
			case <-p.Done():
			case <-ctx.Done():
				grace := 10 * time.Second
				select {
				case <-a.crashed:
					grace = 0
				default:
				}
				p.Stop(grace)
			}
			stopProbe()
			<-probed
			stdout.Flush()
			stderr.Flush()
			a.mu.Lock()
			a.addr = ""
			a.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			a.record("runtime_exit", false, "runtime exited: %v", p.Err())
			a.update(func(st *agentapi.InferenceStatus) {
				st.Ready, st.Error = false, fmt.Sprintf("runtime exited: %v", p.Err())
				st.RuntimeRestarts++
			})
		}
		if time.Since(started) > time.Minute {
			restart.Reset() // it ran a while: not a crash loop
		}
		if !restart.Wait(ctx) {
			return
		}
	}
}

// probeLoop waits for /health, then for a real probe to pass (ready), then
// probes every ProbeInterval; two failures in a row make the replica not
// ready until a probe passes again.
func (a *Agent) probeLoop(ctx context.Context, addr string) {
	base := "http://" + addr
	if isSocket(addr) {
		base = "http://" + socketHost // dialProbe dials the socket
	}
	for {
		if a.healthy(ctx, base) {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(a.cfg.HealthPoll):
		}
	}
	failures := 0
	wait := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		t0 := time.Now()
		err := a.probe(ctx, base)
		if ctx.Err() != nil {
			return
		}
		ms := float64(time.Since(t0).Microseconds()) / 1000
		if err == nil {
			failures = 0
			first := !a.Status().Ready
			load := a.readLoad(ctx, base)
			a.update(func(st *agentapi.InferenceStatus) {
				st.Ready, st.Error, st.ProbeMs, st.LastProbeAt, st.Load = true, "", ms, time.Now(), load
			})
			if first {
				a.record("ready", true, "runtime answered a real probe in %.1f ms: the replica is ready", ms)
			}
			wait = a.cfg.ProbeInterval
			continue
		}
		failures++
		a.log.Info("probe failed", "job_id", a.cfg.JobID, "replica", a.cfg.Replica, "err", err)
		if failures >= 2 || !a.Status().Ready {
			if a.Status().Ready {
				a.record("probe", false, "runtime failed two probes: %v", err)
			}
			a.update(func(st *agentapi.InferenceStatus) {
				st.Ready, st.Error, st.LastProbeAt = false, "probe: "+err.Error(), time.Now()
			})
		}
		wait = a.cfg.HealthPoll
		if a.Status().Ready {
			wait = a.cfg.ProbeInterval / 4
		}
	}
}

func (a *Agent) healthy(ctx context.Context, base string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+a.healthPath(), nil)
	resp, err := a.hc.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// healthPath is the runtime's readiness route: vLLM's /health, the ASR
// NIM's /v1/health/ready.
func (a *Agent) healthPath() string {
	if a.cfg.Inference.Runtime == cosmic.RuntimeParakeet {
		return ParakeetReadyPath
	}
	return "/health"
}

// runtimeEnv is the runtime's environment on top of the agent's, and the
// files it reads at its start. vLLM gets the bootstrap's environment (the
// job's variables). The parakeet runtime's Docker client gets only the NGC
// key read from NGCKeyFile (the value goes to the runtime's environment
// only: never to a log, a record, the status or the command line), and the
// job's variables reach the container through ParakeetEnvFile, so that
// none can redirect the client (DOCKER_HOST, DOCKER_CONTEXT, …) and the key
// with it.
func (a *Agent) runtimeEnv() ([]string, []File, error) {
	if a.cfg.Inference.Runtime != cosmic.RuntimeParakeet {
		return a.cfg.Env, nil, nil
	}
	files := []File{{Path: ParakeetEnvFile, Content: dockerEnvFile(a.cfg.Env)}}
	if a.cfg.NGCKeyFile == "" {
		return nil, files, nil
	}
	b, err := os.ReadFile(a.cfg.NGCKeyFile)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, files, nil // a NIM whose model is in its cache needs no key
		}
		return nil, nil, fmt.Errorf("read the NGC key file %s: %w", a.cfg.NGCKeyFile, errors.Unwrap(err))
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return nil, files, nil
	}
	return []string{NGCAPIKeyEnv + "=" + key}, files, nil
}

// dockerEnvFile is env in docker run --env-file's format: NAME=value a
// line, the value as it is (no quoting; cosmic.Validate refuses a parakeet
// spec's value with a line break).
func dockerEnvFile(env []string) []byte {
	var b bytes.Buffer
	for _, kv := range env {
		if strings.ContainsAny(kv, "\r\n") {
			continue
		}
		b.WriteString(kv)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// probeWAV is the audio of the parakeet probe: half a second.
var probeWAV = wav.Tone(0.5, 16000)

// probe asks the runtime for real work suited to the task it serves
// (cosmic.InferenceSpec.Task): a one-token completion (generate), the
// embedding of a word (embed), a short transcription (parakeet). A vLLM
// whose runner was left to "auto" may have chosen pooling for an embedding
// model and serve no /v1/completions: a 404 there is followed by the
// embeddings probe.
func (a *Agent) probe(ctx context.Context, base string) error {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.ProbeTimeout)
	defer cancel()
	task := a.cfg.Inference.Task()
	err := a.probeTask(ctx, base, task)
	var nf errNotServed
	if task == cosmic.TaskGenerate && errors.As(err, &nf) {
		return a.probeTask(ctx, base, cosmic.TaskEmbed)
	}
	return err
}

// errNotServed is a probe's route answered 404: the runtime does not serve it.
type errNotServed struct{ msg string }

func (e errNotServed) Error() string { return e.msg }

func (a *Agent) probeTask(ctx context.Context, base string, task cosmic.Task) error {
	model := a.cfg.Inference.ServedName()
	var req *http.Request
	switch task {
	case cosmic.TaskEmbed:
		b, _ := json.Marshal(map[string]any{"model": model, "input": "ping"})
		req, _ = http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/embeddings", bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
	case cosmic.TaskTranscription:
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		// The NIM selects its model by language ("multi": Parakeet TDT
		// v3's automatic detection); its "model" field is the NIM's
		// internal model name, not the served one.
		mw.WriteField("language", ParakeetLanguage)
		mw.WriteField("response_format", "json")
		fw, _ := mw.CreateFormFile("file", "probe.wav")
		fw.Write(probeWAV)
		mw.Close()
		req, _ = http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/audio/transcriptions", &body)
		req.Header.Set("Content-Type", mw.FormDataContentType())
	default:
		b, _ := json.Marshal(map[string]any{"model": model, "prompt": "ping", "max_tokens": 1})
		req, _ = http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		msg := fmt.Sprintf("%s answered %d: %s", req.URL.Path, resp.StatusCode, strings.TrimSpace(string(b[:min(len(b), 200)])))
		if resp.StatusCode == http.StatusNotFound {
			return errNotServed{msg}
		}
		return errors.New(msg)
	}
	var out struct {
		Choices []json.RawMessage `json:"choices"`
		Text    *string           `json:"text"`
		Data    []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return fmt.Errorf("%s: %v", req.URL.Path, err)
	}
	if len(out.Choices) == 0 && out.Text == nil && (len(out.Data) == 0 || len(out.Data[0].Embedding) == 0) {
		return fmt.Errorf("%s answered without output", req.URL.Path)
	}
	return nil
}

// announce keeps the agent announced under the job's topic with its agentapi.InferenceMeta,
// refreshing every third of the TTL and at once on every change; at the end
// it withdraws the announcement (not after Crash).
func (a *Agent) announce(ctx context.Context, n *fabric.Node, dirs []fabric.PublicKey) {
	if len(dirs) == 0 {
		<-ctx.Done()
		return
	}
	every := a.cfg.AnnounceTTL / 3
	retry := backoff.Backoff{Min: min(500*time.Millisecond, every), Max: every}
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		m := a.Status().InferenceMeta
		if m.Ready && !a.proxyConnected(n) {
			// The proxy reaches the agent only over a connection the agent
			// opened: ready means reachable too.
			m.Ready, m.Error = false, "not connected to proxy-inference yet"
		}
		meta, _ := json.Marshal(m)
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := n.Announce(actx, fabric.AnnounceParams{Topic: agentapi.InferenceTopic(a.cfg.JobID), TTLSeconds: a.cfg.AnnounceTTL.Seconds(), Meta: meta}, dirs...)
		cancel()
		next := every
		if err == nil && a.routable.Swap(m.Ready) != m.Ready {
			a.publish() // the directories now say what the runtime is
		}
		if err != nil && ctx.Err() == nil {
			// A directory that has not admitted a new key yet admits it a
			// moment later: try again soon.
			a.log.Warn("announce failed", "err", err)
			next = retry.Next()
		} else {
			retry.Reset()
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(next)
		select {
		case <-ctx.Done():
			select {
			case <-a.crashed:
				return
			default:
			}
			wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			for _, d := range dirs {
				n.Call(wctx, d, fabric.MethodUnannounce, fabric.LookupParams{Topic: agentapi.InferenceTopic(a.cfg.JobID)}, nil)
			}
			cancel()
			return
		case <-t.C:
		case <-a.kick:
		}
	}
}

func (a *Agent) kickAnnounce() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// proxyConnected reports whether the agent has a connection to a
// proxy-inference peer (true when the bootstrap names none with an address).
func (a *Agent) proxyConnected(n *fabric.Node) bool {
	some := false
	for _, p := range a.cfg.Peers {
		if p.Role != agentapi.RoleProxy || len(p.Addrs) == 0 {
			continue
		}
		some = true
		if n.Connected(p.Key) {
			return true
		}
	}
	return !some
}

// appLine returns the emitter of the runtime's output lines on stream.
func (a *Agent) appLine(stream string) func(string) {
	return func(line string) {
		if a.probeLine(line) {
			return // the agent's probe, not the job's output
		}
		a.cfg.Logs.Emit(joblog.Record{Time: time.Now(), JobID: a.cfg.JobID, Team: a.cfg.Team, Replica: a.cfg.Replica,
			Source: joblog.SourceApplication, Stream: stream, Line: line})
	}
}

// lineWriter splits what is written into lines (at most 16 KiB each).
type lineWriter struct {
	mu   sync.Mutex
	buf  []byte
	emit func(string)
}

const maxLine = 16 << 10

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			if len(w.buf) >= maxLine {
				w.emit(string(w.buf[:maxLine]))
				w.buf = append(w.buf[:0], w.buf[maxLine:]...)
				continue
			}
			return len(p), nil
		}
		w.emit(strings.TrimRight(string(w.buf[:i]), "\r"))
		w.buf = w.buf[i+1:]
	}
}

// Flush emits a last, unterminated line.
func (w *lineWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.emit(string(w.buf))
		w.buf = nil
	}
}

// HandleReports registers f for the agentapi.MethodInferenceReport events agents send; a
// rack worker calls it on its fabric node (whose policy admits the agents).
func HandleReports(r fabric.Registrar, f func(peer fabric.PublicKey, st agentapi.InferenceStatus)) {
	fabric.HandleFunc(r, agentapi.MethodInferenceReport, func(_ context.Context, peer fabric.PublicKey, st agentapi.InferenceStatus) (struct{}, error) {
		f(peer, st)
		return struct{}{}, nil
	})
}

// socketHost is the host of the probes' URLs to a runtime on a unix socket.
const socketHost = "runtime.sock"

// isSocket says whether a runtime's address is a unix socket's path
// (Placement.Socket), not host:port.
func isSocket(addr string) bool { return strings.HasPrefix(addr, "/") }

// dialRuntime connects to the runtime at addr: host:port, or a unix
// socket's path.
func dialRuntime(ctx context.Context, addr string) (net.Conn, error) {
	network := "tcp"
	if isSocket(addr) {
		network = "unix"
	}
	return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
}
