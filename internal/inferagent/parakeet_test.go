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
	files []inferagent.File
}

func (l *envLauncher) Start(ctx context.Context, la inferagent.Launch) (inferagent.Process, error) {
	l.mu.Lock()
	l.env, l.files = la.Env, la.Files
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
		Env: []string{"COSMICAC_JOB_ID=job1", "DOCKER_HOST=tcp://attacker.example:2375"}}, nil)
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
	files := l.files
	l.mu.Unlock()
	// The Docker client gets the key and nothing of the job's: a spec's
	// DOCKER_HOST would send the container's environment, key included,
	// to another daemon. The job's variables reach the container through
	// --env-file.
	if !slices.Equal(env, []string{"NGC_API_KEY=" + secret}) {
		t.Errorf("the Docker client's added environment is %q, want the key only", env)
	}
	if len(files) != 1 || files[0].Path != inferagent.ParakeetEnvFile ||
		string(files[0].Content) != "COSMICAC_JOB_ID=job1\nDOCKER_HOST=tcp://attacker.example:2375\n" {
		t.Errorf("files %+v, want the job's variables in %s", files, inferagent.ParakeetEnvFile)
	}
	st := a.Status()
	if !strings.Contains(st.Command, "-e NGC_API_KEY ") || !strings.Contains(st.Command, "--env-file "+inferagent.ParakeetEnvFile) || !strings.Contains(st.Command, inferagent.ParakeetImage) ||
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

// TestExecLauncherWritesFiles: the real launcher writes a launch's files
// (0600, an older file's mode tightened) before the runtime starts.
func TestExecLauncherWritesFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "nim.env")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("OLD=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	p, err := inferagent.ExecLauncher{}.Start(context.Background(), inferagent.Launch{
		Command: inferagent.Command{Path: "cat", Args: []string{path}},
		Files:   []inferagent.File{{Path: path, Content: []byte("A=1\nB=two words\n")}},
		Stdout:  &out, Stderr: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if p.Err() != nil || out.String() != "A=1\nB=two words\n" {
		t.Fatalf("cat: %v %q", p.Err(), out.String())
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v, want 0600", fi.Mode(), err)
	}
}
