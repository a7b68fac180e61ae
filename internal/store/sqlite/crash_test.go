package sqlite

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// crashEnv, when set to "PATH ROUND", makes TestCrashSafety the child that
// writes into the database at PATH until it is killed.
const crashEnv = "COSMICAC_STORE_CRASH_CHILD"

// TestCrashSafety kills a writing process with SIGKILL and checks that
// every transaction it acknowledged as committed is in the reopened
// database, whole (the job and its GPU claim), and that the file is sound.
func TestCrashSafety(t *testing.T) {
	if v := os.Getenv(crashEnv); v != "" {
		crashChild(v)
		return
	}
	if testing.Short() {
		t.Skip("spawns writer processes")
	}
	path := filepath.Join(t.TempDir(), "cosmicac.db")
	ctx := context.Background()
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashSafety$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", crashEnv, path, round))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killAfter := 150 + 100*round
		var acked []string
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			id, ok := strings.CutPrefix(sc.Text(), "ack ")
			if !ok {
				continue
			}
			acked = append(acked, id)
			if len(acked) == killAfter {
				if err := cmd.Process.Kill(); err != nil { // SIGKILL
					t.Fatal(err)
				}
			}
		}
		err = cmd.Wait()
		if len(acked) < killAfter {
			t.Fatalf("round %d: child acknowledged %d jobs and ended (%v) before it was killed", round, len(acked), err)
		}
		if ws, ok := cmd.ProcessState.Sys().(interface{ Signaled() bool }); ok && !ws.Signaled() {
			t.Fatalf("round %d: child was not killed by a signal: %v", round, cmd.ProcessState)
		}

		s, err := Open(path)
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		if err := s.IntegrityCheck(ctx); err != nil {
			t.Errorf("round %d: %v", round, err)
		}
		for _, id := range acked {
			if _, err := s.GetJob(ctx, id); err != nil {
				t.Errorf("round %d: acknowledged job lost: %v", round, err)
			}
		}
		// Each transaction is whole: a job exists if and only if its claim does.
		_, total, err := s.ListJobs(ctx, store.ListJobsQuery{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Reservations(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != total {
			t.Errorf("round %d: %d jobs but %d reservations", round, total, len(res))
		}
		t.Logf("round %d: killed after %d acknowledged commits; %d jobs in the database", round, len(acked), total)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// crashChild writes jobs, each with a GPU claim in one transaction, and
// prints "ack ID" once each has committed, until it is killed.
func crashChild(arg string) {
	path, roundStr, _ := strings.Cut(arg, " ")
	round, _ := strconv.Atoi(roundStr)
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	s, err := Open(path)
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	rackID := fmt.Sprintf("crash-%d", round)
	if err := s.PutRack(ctx, store.Rack{Rack: cosmic.Rack{ID: rackID, Type: cosmic.RackTypeServer}}); err != nil {
		fail(err)
	}
	deadline := time.Now().Add(time.Minute) // the parent kills it long before
	for i := 0; time.Now().Before(deadline); i++ {
		id := fmt.Sprintf("crash-%d-%06d", round, i)
		j := cosmic.NewJob(id, "u", "t", cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: id, Location: "us",
			Labels: map[string]string{"round": roundStr}, Resources: cosmic.Resources{GPU: 1}}, time.Now())
		err := s.Update(ctx, func(tx store.Tx) error {
			if err := tx.CreateJob(ctx, j); err != nil {
				return err
			}
			return tx.ClaimGPUs(ctx, cosmic.Reservation{JobID: id, Rack: rackID,
				Nodes: []cosmic.NodeAlloc{{Node: fmt.Sprintf("n%d", i/8), GPUs: []int{i % 8}}}})
		})
		if err != nil {
			fail(err)
		}
		fmt.Println("ack " + id)
	}
	os.Exit(3)
}
