package inferagent_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferagent"
	"github.com/cosmicac/cosmicac/internal/inferagent/simlaunch"
	"github.com/cosmicac/cosmicac/internal/joblog"
)

// envLauncher records the environment each runtime was started with.
type envLauncher struct {
	inner *simlaunch.Launcher
	mu    sync.Mutex
	env   []string
}

func (l *envLauncher) Start(ctx context.Context, la inferagent.Launch) (inferagent.Process, error) {
	l.mu.Lock()
	l.env = la.Env
	l.mu.Unlock()
	return l.inner.Start(ctx, la)
}

// TestParakeetAgent: a parakeet agent runs the ASR NIM's container, waits
// for the NIM's readiness route (/v1/health/ready), probes with a real
// transcription (language "multi", as the NIM selects its model), and
// hands the NGC key to the runtime's environment only: not the command
// line, the status, nor any record.
func TestParakeetAgent(t *testing.T) {
	const secret = "nvapi-SECRET-do-not-leak"
	keyFile := filepath.Join(t.TempDir(), "ngc-api-key")
	if err := os.WriteFile(keyFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	id, _ := fabric.GenerateIdentity()
	logs := joblog.NewRing(1000)
	l := &envLauncher{inner: &simlaunch.Launcher{}}
	a := inferagent.New(inferagent.Config{JobID: "job1", Team: "t", Placement: inferagent.Placement{VMICount: 1, GPUs: 1},
		Inference: cosmic.InferenceSpec{Runtime: cosmic.RuntimeParakeet, Model: cosmic.ParakeetModel},
		Identity:  id, Logs: logs, HealthPoll: 10 * time.Millisecond, Launcher: l, NGCKeyFile: keyFile,
		Env: []string{"COSMICAC_JOB_ID=job1"}}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-a.Ready():
	case <-time.After(10 * time.Second):
		t.Fatalf("not ready: %+v", a.Status())
	}
	l.mu.Lock()
	env := l.env
	l.mu.Unlock()
	if !slices.Contains(env, "NGC_API_KEY="+secret) || !slices.Contains(env, "COSMICAC_JOB_ID=job1") {
		t.Errorf("runtime environment %q lacks the key or the bootstrap's", env)
	}
	st := a.Status()
	if !strings.Contains(st.Command, "-e NGC_API_KEY ") || !strings.Contains(st.Command, inferagent.ParakeetImage) ||
		!strings.Contains(st.Command, "NIM_HTTP_API_PORT=8000") {
		t.Errorf("command line %q", st.Command)
	}
	if strings.Contains(st.Command, secret) {
		t.Errorf("the command line holds the key: %q", st.Command)
	}
	for _, r := range logs.Job("job1") {
		if strings.Contains(r.Line, secret) {
			t.Errorf("a record holds the key: %q", r.Line)
		}
	}
}
