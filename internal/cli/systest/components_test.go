package systest

import (
	"bufio"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/netnstest"
	"github.com/cosmicac/cosmicac/internal/store/postgres"
	"github.com/cosmicac/cosmicac/internal/store/postgres/pgtest"
)

// component runs `cosmicac ARGS...` as a child process and returns the
// values of the lines it prints that start with the given prefixes.
func component(t *testing.T, prefixes []string, args ...string) map[string]string {
	_, v := componentCmd(t, prefixes, args...)
	return v
}

// componentCmd is component, also returning the process.
func componentCmd(t *testing.T, prefixes []string, args ...string) (*exec.Cmd, map[string]string) {
	t.Helper()
	return startComponent(t, exec.Command(os.Args[0], args...), prefixes)
}

// componentOn is component with the process on host h.
func componentOn(t *testing.T, h *netnstest.Host, prefixes []string, args ...string) map[string]string {
	t.Helper()
	_, v := startComponent(t, h.Command(os.Args[0], args...), prefixes)
	return v
}

// startMain starts cmd, this test binary run as the cosmicac command
// (COSMICAC_TEST_MAIN=1, and env), its stderr the test's, and returns its
// stdout.
func startMain(t *testing.T, cmd *exec.Cmd, env ...string) io.Reader {
	t.Helper()
	cmd.Env = append(append(os.Environ(), "COSMICAC_TEST_MAIN=1"), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return out
}

// startComponent starts cmd, a component of this binary, and returns the
// values of its lines that begin with prefixes.
func startComponent(t *testing.T, cmd *exec.Cmd, prefixes []string) (*exec.Cmd, map[string]string) {
	t.Helper()
	out := startMain(t, cmd)
	t.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	got := make(chan map[string]string, 1)
	go func() {
		vals := map[string]string{}
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) >= 2 {
				for _, p := range prefixes {
					if f[0] == p {
						vals[p] = f[1]
					}
				}
			}
			if len(vals) == len(prefixes) {
				got <- vals
				vals = map[string]string{}
			}
		}
	}()
	select {
	case v := <-got:
		return cmd, v
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not start", strings.Join(cmd.Args, " "))
		return nil, nil
	}
}

// identities makes a data dir under base for each of names, with a fabric
// identity in it, and returns the dirs and the public keys by name.
func identities(t *testing.T, base string, names ...string) (map[string]string, map[string]fabric.PublicKey) {
	t.Helper()
	dirs, keys := map[string]string{}, map[string]fabric.PublicKey{}
	for _, c := range names {
		dirs[c] = filepath.Join(base, c)
		id, err := fabric.LoadOrCreateIdentity(dirs[c])
		if err != nil {
			t.Fatal(err)
		}
		keys[c] = id.PublicKey()
	}
	return dirs, keys
}

// shareIdentity puts identity (an identity file's bytes) in dir, making
// it: orks of one database share one key.
func shareIdentity(t *testing.T, dir string, identity []byte) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, fabric.IdentityFile), identity, 0o600); err != nil {
		t.Fatal(err)
	}
}

// portsGiven are the ports freePort has handed out.
var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

func freePort(t *testing.T) string {
	t.Helper()
	// A port the kernel gave for :0 and was closed again is the kernel's to
	// give out again, to any process's next :0 or outgoing connection, and
	// parallel copies of the tests (hack/stress.sh) then collide on it.
	// Ports below the ephemeral range (Linux: 32768 on) are never given out
	// that way: pick one at random there that is free for TCP and UDP (the
	// fabric listens on both). A port is handed out once per test binary:
	// one given to a process that binds it only later (an ork that follows
	// listens once it leads) is still free meanwhile.
	for range 100 {
		port := 20000 + rand.IntN(12000)
		portsMu.Lock()
		taken := portsGiven[port]
		portsGiven[port] = true
		portsMu.Unlock()
		if taken {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		return addr
	}
	t.Fatal("no free port in 20000-31999")
	return ""
}

// TestComponentsAsProcesses runs wrk-ork, a simulated rack worker and the
// app-node as three processes that talk over the fabric, registers the rack
// through the API, and runs a job on it.
func TestComponentsAsProcesses(t *testing.T) { componentsAsProcesses(t, nil) }

// TestComponentsAsProcessesOnPostgres is TestComponentsAsProcesses with the
// ork and the app-node on one PostgreSQL database (--database
// postgres://…): both migrate it at once, the job and its GPUs survive the
// ork's SIGKILL there, and nothing is written to a SQLite file.
func TestComponentsAsProcessesOnPostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	dirs := componentsAsProcesses(t, []string{"--database", dsn})
	for _, d := range dirs {
		if dbs, _ := filepath.Glob(filepath.Join(d, "*.db")); len(dbs) > 0 {
			t.Errorf("SQLite files written with --database postgres://: %v", dbs)
		}
	}
	ctx := context.Background()
	st, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	res, err := st.Reservations(ctx)
	if err != nil || len(res) != 2 {
		t.Errorf("reservations in PostgreSQL = %+v (%v), want the two jobs'", res, err)
	}
	if teams, err := st.ListTeams(ctx); err != nil || len(teams) == 0 {
		t.Errorf("teams in PostgreSQL = %v (%v), want the app-node's", teams, err)
	}
}

// componentsAsProcesses is TestComponentsAsProcesses, with extra flags
// for the ork and the app-node; it returns the components' data dirs.
func componentsAsProcesses(t *testing.T, dbFlags []string) map[string]string {
	base := t.TempDir()
	dirs, keys := identities(t, base, "ork", "app", "sim", "mon")
	orkArgs := append([]string{"wrk-ork", "--data-dir", dirs["ork"], "--listen", freePort(t), "--app-node-key", keys["app"].String(),
		"--monitor-key", keys["mon"].String(), "--heartbeat", "50ms"}, dbFlags...)
	orkCmd, orkOut := componentCmd(t, []string{"fabric"}, orkArgs...)
	ork := orkOut["fabric"]
	apiAddr := freePort(t)
	mon := component(t, []string{"fabric", "monitor"}, "wrk-monitor", "--data-dir", dirs["mon"], "--listen", "127.0.0.1:0",
		"--ork", ork, "--http-listen", "127.0.0.1:0", "--app-node-url", "http://"+apiAddr)
	sim := component(t, []string{"fabric"}, "wrk-server-sim", "--data-dir", dirs["sim"], "--listen", "127.0.0.1:0",
		"--ork", ork, "--monitor", mon["fabric"], "--step", "5ms", "--rack", "r1", "--location", "eu")["fabric"]
	api := component(t, []string{"fabric", "api"}, append([]string{"app-node", "--data-dir", dirs["app"], "--listen", "127.0.0.1:0",
		"--ork", ork, "--api-listen", apiAddr}, dbFlags...)...)["api"]

	tok, err := os.ReadFile(filepath.Join(dirs["app"], "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(strings.TrimSuffix(api, "/api/v1"), strings.TrimSpace(string(tok)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, simAddrs, err := fabric.ParsePeer(sim)
	if err != nil {
		t.Fatal(err)
	}
	rack, err := c.RegisterRack(ctx, apiv1.RegisterRack{ID: "r1", Location: "eu", GPUModel: "GH100_H100_SXM5_80GB",
		WorkerKey: keys["sim"].String(), WorkerAddrs: simAddrs})
	if err != nil {
		t.Fatal(err)
	}
	if !rack.Reachable || rack.GPUs != 16 {
		t.Fatalf("registered rack = %+v, want reachable with 16 GPUs", rack)
	}
	j, err := c.CreateJob(ctx, cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: "p", Location: "eu", Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: 2}})
	if err != nil {
		t.Fatal(err)
	}
	j, err = c.WaitJob(ctx, j.ID, client.Settled, nil)
	if err != nil || j.Status.State != cosmic.StateRunning {
		t.Fatalf("job: %s (%v)", j.Status.State, err)
	}

	// The job's system records reached the monitor process.
	var steps []string
	err = c.JobLogs(ctx, j.ID, client.LogOptions{MonitorURL: strings.TrimSuffix(mon["monitor"], "/monitor/v1")}, func(ev client.LogEvent) error {
		if ev.Record != nil {
			steps = append(steps, ev.Record.Step)
		}
		return nil
	})
	if err != nil || !slices.Contains(steps, "ready") {
		t.Fatalf("logs from the monitor process: steps %v (%v)", steps, err)
	}

	// The ork dies (SIGKILL) and comes back on the same address: the job
	// and its GPUs are still there, and new work is placed beside it.
	orkCmd.Process.Signal(syscall.SIGKILL)
	orkCmd.Wait()
	componentCmd(t, []string{"fabric"}, orkArgs...)
	if j, err = c.GetJob(ctx, j.ID); err != nil || j.Status.State != cosmic.StateRunning {
		t.Fatalf("after ork restart: %s (%v)", j.Status.State, err)
	}
	j2, err := c.CreateJob(ctx, cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: "q", Location: "eu", Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: 8}})
	if err != nil {
		t.Fatal(err)
	}
	if j2, err = c.WaitJob(ctx, j2.ID, client.Settled, nil); err != nil || j2.Status.State != cosmic.StateRunning {
		t.Fatalf("second job after ork restart: %s (%v)", j2.Status.State, err)
	}
	racks, err := c.ListRacks(ctx)
	if err != nil || len(racks) != 1 || racks[0].FreeGPUs != 6 {
		t.Fatalf("racks after ork restart = %+v (%v), want 6 GPUs free", racks, err)
	}
	return dirs
}
