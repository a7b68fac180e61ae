// Package simlaunch is the inference agent's launcher of the simulated
// runtime (internal/simruntime) in its own process, in place of the model
// server's command: the simulated rack has no GPU and no vLLM. It is apart
// from internal/inferagent so that the production agent carries no
// simulator; the wiring (internal/platform, the CLI's `agent inference
// --simulated`) and the tests choose it.
//
// Importers: internal/platform, internal/cli/components, tests.
package simlaunch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/inferagent"
	"github.com/cosmicac/cosmicac/internal/simruntime"
)

var _ inferagent.Launcher = (*Launcher)(nil)

// Launcher starts simruntime in the agent's process instead of the
// command (the simulated rack has no GPU and no vLLM). The head serves on
// 127.0.0.1 at an ephemeral port (many replicas share the host); a
// worker only says it joined. It writes vLLM-like startup lines, saying
// plainly that the runtime is simulated, and an access log line per request.
type Launcher struct {
	// Config is the template of each runtime: delays, faults, load time.
	// Runtime, Model and ServedModelName come from the spec.
	Config simruntime.Config

	mu   sync.Mutex
	last *simruntime.Running
}

// Runtime is the runtime the launcher started last (nil before), for fault
// injection in tests.
func (s *Launcher) Runtime() *simruntime.Running {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Start implements inferagent.Launcher.
func (s *Launcher) Start(ctx context.Context, l inferagent.Launch) (inferagent.Process, error) {
	out := l.Stdout
	if out == nil {
		out = io.Discard
	}
	fmt.Fprintf(out, "INFO [cosmicac-simulated] this is a SIMULATED runtime: no model is loaded and replies are deterministic text\n")
	fmt.Fprintf(out, "INFO [cosmicac-simulated] on a GPU node the agent would run: %s\n", l.Command)
	p := &simProcess{done: make(chan struct{})}
	if l.Role != agentapi.PlacementHead {
		fmt.Fprintf(out, "INFO [cosmicac-simulated] headless worker (node rank %d) joined the head at %s\n", l.Placement.VMIIndex, first(l.Placement.Hosts))
		return p, nil
	}
	cfg := s.Config
	cfg.Runtime = string(l.Inference.Runtime)
	if cfg.Runtime == "" {
		cfg.Runtime = simruntime.RuntimeVLLM
	}
	cfg.Model, cfg.ServedModelName = l.Inference.Model, l.Inference.ServedName()
	cfg.Adapters = nil
	for _, a := range l.Inference.Adapters {
		cfg.Adapters = append(cfg.Adapters, a.Name)
	}
	cfg.Embeddings = cfg.Embeddings || l.Inference.Task() == cosmic.TaskEmbed
	// vLLM answers tool_choice "auto" only with both flags.
	cfg.AutoToolChoice = cfg.AutoToolChoice || (l.Inference.Args["enable-auto-tool-choice"] == "true" && l.Inference.Args["tool-call-parser"] != "")
	cfg.AccessLog = out
	r, err := simruntime.Start("127.0.0.1:0", simruntime.New(cfg))
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "INFO:     Started server process [%d]\nINFO:     Uvicorn running on %s (Press CTRL+C to quit)\n", os.Getpid(), r.URL())
	p.run = r
	s.mu.Lock()
	s.last = r
	s.mu.Unlock()
	go func() {
		<-r.Done()
		p.once.Do(func() {
			p.err = errors.New("simulated runtime stopped")
			close(p.done)
		})
	}()
	return p, nil
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

type simProcess struct {
	run  *simruntime.Running
	once sync.Once
	done chan struct{}
	err  error
}

func (p *simProcess) Addr() string {
	if p.run == nil {
		return ""
	}
	return p.run.Addr()
}
func (p *simProcess) Done() <-chan struct{} { return p.done }
func (p *simProcess) Err() error            { return p.err }
func (p *simProcess) Stop(time.Duration) {
	if p.run != nil {
		p.run.Close()
	}
	p.once.Do(func() {
		p.err = errors.New("stopped")
		close(p.done)
	})
}

// Simulated says the runtimes it starts are simulated: the agent's system
// log says so instead of "runtime started".
func (*Launcher) Simulated() bool { return true }
