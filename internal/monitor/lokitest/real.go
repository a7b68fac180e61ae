package lokitest

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/testenv"
)

// BinEnv names the Loki binary that Start runs (hack/build-loki.sh builds
// it; hack/test.sh sets the variable).
const BinEnv = "COSMICAC_LOKI_BIN"

// Real is a Loki process: single binary, filesystem storage, auth off, on
// loopback, in a temp dir of the test.
type Real struct {
	// URL is its HTTP address, http://127.0.0.1:PORT.
	URL string
	Dir string
	cmd *exec.Cmd
	out *bytes.Buffer
}

// Start runs the Loki named by $COSMICAC_LOKI_BIN until the test ends,
// and waits until it is ready. Without the variable the test skips with a
// message, and under CI ($CI set) fails. limits are extra lines of its
// limits_config ("ingestion_rate_mb: 64"); the rest are Loki's defaults.
func Start(t testing.TB, limits ...string) *Real {
	t.Helper()
	bin := os.Getenv(BinEnv)
	if bin == "" {
		testenv.Require(t, false, "no real Loki: set %s to a Loki binary (hack/build-loki.sh builds one; hack/test.sh sets it)", BinEnv)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s=%s: %v", BinEnv, bin, err)
	}
	dir := t.TempDir()
	httpPort, grpcPort := freePort(t), freePort(t)
	var lim strings.Builder
	for _, l := range limits {
		fmt.Fprintf(&lim, "  %s\n", l)
	}
	cfg := fmt.Sprintf(`auth_enabled: false
server:
  http_listen_address: 127.0.0.1
  http_listen_port: %d
  grpc_listen_address: 127.0.0.1
  grpc_listen_port: %d
  log_level: warn
common:
  instance_addr: 127.0.0.1
  path_prefix: %[3]s
  replication_factor: 1
  storage:
    filesystem:
      chunks_directory: %[3]s/chunks
      rules_directory: %[3]s/rules
  ring:
    kvstore:
      store: inmemory
ingester:
  lifecycler:
    min_ready_duration: 0s
    final_sleep: 0s
schema_config:
  configs:
    - from: 2020-10-24
      store: tsdb
      object_store: filesystem
      schema: v13
      index:
        prefix: index_
        period: 24h
limits_config:
  allow_structured_metadata: true
%s
frontend:
  scheduler_dns_lookup_period: 200ms
frontend_worker:
  dns_lookup_duration: 200ms
analytics:
  reporting_enabled: false
pattern_ingester:
  enabled: false
`, httpPort, grpcPort, dir, lim.String())
	// The query frontend and the querier's worker find the scheduler by
	// polling (every 10s and 3s by default: frontend.scheduler-dns-lookup-period
	// in pkg/lokifrontend/frontend/v2/frontend.go, querier.dns-lookup-period
	// in pkg/querier/worker/worker.go), and Loki is not ready before they
	// have: 200ms makes it ready in about a second, not ten.
	cfgPath := filepath.Join(dir, "loki.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &Real{URL: fmt.Sprintf("http://127.0.0.1:%d", httpPort), Dir: dir, out: &bytes.Buffer{}}
	r.cmd = exec.Command(bin, "-config.file="+cfgPath)
	r.cmd.Dir = dir
	out := &lockedWriter{w: r.out}
	r.cmd.Stdout, r.cmd.Stderr = out, out
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start loki: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- r.cmd.Wait() }()
	t.Cleanup(func() {
		r.cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			r.cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("loki's output:\n%s", r.output())
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("loki exited before it was ready: %v\n%s", err, r.output())
		default:
		}
		if resp, err := http.Get(r.URL + "/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("loki not ready after 2m:\n%s", r.output())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (r *Real) output() string {
	w := r.cmd.Stdout.(*lockedWriter)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.String()
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
