package systest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store/postgres/pgtest"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// upProcess is `cosmicac up` running as a child process.
type upProcess struct {
	cmd *exec.Cmd
	url string
}

func startUp(t *testing.T, home, dataDir string, extra ...string) *upProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"up", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--sim-step", "5ms", "--heartbeat", "50ms"}, extra...)...)
	out := startMain(t, cmd, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "API" {
				urls <- strings.TrimSuffix(f[1], "/api/v1")
			}
		}
	}()
	select {
	case u := <-urls:
		return &upProcess{cmd: cmd, url: u}
	case <-time.After(60 * time.Second):
		t.Fatal("cosmicac up did not print its API address")
		return nil
	}
}

// TestUpOnPostgres runs `cosmicac up --database postgres://…`: a job runs,
// and after a SIGKILL and a restart it is there with its GPUs, kept in
// PostgreSQL (no SQLite file in the data dir).
func TestUpOnPostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	home, dataDir := t.TempDir(), t.TempDir()
	up := startUp(t, home, dataDir, "--database", dsn)
	tok, err := os.ReadFile(filepath.Join(dataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tok))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := client.New(up.url, token)
	j, err := c.CreateJob(ctx, cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: "pg", Location: "us", Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if j, err = c.WaitJob(ctx, j.ID, client.Settled, nil); err != nil || j.Status.State != cosmic.StateRunning {
		t.Fatalf("job on PostgreSQL: %s (%v)", j.Status.State, err)
	}
	up.cmd.Process.Signal(syscall.SIGKILL)
	up.cmd.Wait()
	up2 := startUp(t, home, dataDir, "--database", dsn)
	c2 := client.New(up2.url, token)
	// The new simulated rack has no VMs: the ork restarts the job's.
	if got, err := c2.WaitJob(ctx, j.ID, client.Settled, nil); err != nil || got.Status.State != cosmic.StateRunning {
		t.Fatalf("after restart: %s (%v)", got.Status.State, err)
	}
	racks, err := c2.ListRacks(ctx)
	if err != nil || len(racks) != 1 || racks[0].FreeGPUs != racks[0].GPUs-3 {
		t.Fatalf("racks after restart = %+v (%v), want 3 GPUs held", racks, err)
	}
	if dbs, _ := filepath.Glob(filepath.Join(dataDir, "*.db")); len(dbs) > 0 {
		t.Errorf("SQLite files written with --database postgres://: %v", dbs)
	}
}

// TestUpSurvivesSIGKILL kills `cosmicac up` with SIGKILL while jobs are
// being created; after a restart every job the API acknowledged exists and
// no more GPUs are held than the rack has.
func TestUpSurvivesSIGKILL(t *testing.T) {
	home, dataDir := t.TempDir(), t.TempDir()
	up := startUp(t, home, dataDir)
	tok, err := os.ReadFile(filepath.Join(dataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tok))
	c := client.New(up.url, token)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var (
		mu    sync.Mutex
		acked []string
		wg    sync.WaitGroup
	)
	stop := make(chan struct{})
	// midStream is closed with the 20th acknowledgement: the kill comes
	// while the workers are still creating jobs.
	const killAfter = 20
	midStream := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				spec := cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: fmt.Sprintf("w%d-%d", w, i), Location: "us",
					Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: 1 + (i+w)%4}}
				j, err := c.CreateJob(ctx, spec)
				if err != nil {
					return // the process is gone
				}
				mu.Lock()
				acked = append(acked, j.ID)
				if len(acked) == killAfter {
					close(midStream)
				}
				mu.Unlock()
			}
		}()
	}
	select {
	case <-midStream:
	case <-time.After(waittest.Timeout):
		t.Fatalf("%d jobs were not acknowledged within %v", killAfter, waittest.Timeout)
	}
	if err := up.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	up.cmd.Wait()
	close(stop)
	wg.Wait()
	mu.Lock()
	ids := append([]string(nil), acked...)
	mu.Unlock()
	if len(ids) == 0 {
		t.Fatal("no job was acknowledged before the kill")
	}

	up2 := startUp(t, home, dataDir)
	c2 := client.New(up2.url, token)
	for _, id := range ids {
		if _, err := c2.GetJob(ctx, id); err != nil {
			t.Fatalf("acknowledged job %s lost after SIGKILL: %v", id, err)
		}
	}
	// Once the jobs settle, the GPUs held add up to what the rack shows.
	var held, free int
	waittest.NoError(t, func() error {
		list, err := c2.ListJobs(ctx, client.ListOptions{Size: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if list.Total < len(ids) {
			t.Fatalf("list shows %d jobs, %d were acknowledged", list.Total, len(ids))
		}
		var busy []string
		held = 0
		for _, j := range list.Items {
			switch j.Status.State {
			case cosmic.StatePending, cosmic.StateStarting, cosmic.StateRestarting, cosmic.StateCreating, cosmic.StateDeleting:
				busy = append(busy, j.ID+" "+string(j.Status.State))
			}
			if j.Status.State.HoldsGPUs() {
				held += j.Spec.Resources.GPU
			}
		}
		racks, err := c2.ListRacks(ctx)
		if err != nil || len(racks) != 1 {
			t.Fatalf("racks: %v %v", racks, err)
		}
		free = racks[0].FreeGPUs
		if len(busy) > 0 || held+free != racks[0].GPUs {
			return fmt.Errorf("jobs hold %d GPUs, %d free, rack has %d; busy: %v", held, free, racks[0].GPUs, busy)
		}
		return nil
	}, "the jobs to settle after the restart")
	if held > 16 {
		t.Fatalf("jobs hold %d GPUs on a 16-GPU rack", held)
	}
	t.Logf("%d jobs acknowledged before SIGKILL, all present after restart; %d GPUs held, %d free", len(ids), held, free)
}
