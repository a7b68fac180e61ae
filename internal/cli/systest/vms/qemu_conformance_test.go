package vms

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/qemu"
	"github.com/cosmicac/cosmicac/internal/qemuworker"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/waittest"
	"github.com/cosmicac/cosmicac/internal/worker"
	"github.com/cosmicac/cosmicac/internal/worker/workertest"
	"golang.org/x/sys/unix"
)

// TestQEMUWorkerConformance runs the worker conformance suite
// (internal/worker/workertest) against wrk-server-qemu's worker with real
// VMs from hack/vm-image.sh's image (KVM where the host has it, else TCG):
// the checks run chained on one rack (workertest.Chained: three boots, not
// six, each minutes of CPU under TCG), and a replica is running when the
// agent in it has reported to the worker. The worker's restart is a new
// worker (a new fabric node of the same key, at the same address, a new
// keyring) on the same directory, the old one gone with its VMs left
// running: the new one adopts the running VM, and the agent in it reaches
// the new worker.
func TestQEMUWorkerConformance(t *testing.T) {
	t.Parallel() // minutes of emulated boots: beside the others
	needAMD64Host(t)
	im, _ := vmImage(t)
	agentBin, relay := staticAgent(t), relayCommand(t)
	workertest.Run(t, func(t *testing.T) *workertest.Rack {
		// A short directory: the VMs' unix sockets live in it, at most 107
		// bytes a path (a subtest's TempDir is longer).
		dir, err := os.MkdirTemp("", "qc-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			// The VMs outlive their worker (no StopVMsOnExit): the test's end
			// ends them.
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				qemu.KillStale(filepath.Join(dir, e.Name()))
			}
			os.RemoveAll(dir)
		})
		consolesOnFailure(t, dir)
		id, err := fabric.GenerateIdentity()
		if err != nil {
			t.Fatal(err)
		}
		const rack = "q1"
		rec := &workertest.Recorder{}
		logs := &adoptionLogs{testLogs: testLogs{t}}
		addr := "127.0.0.1:0"
		var stop func()
		start := func() worker.Worker {
			ring := trust.NewKeyring()
			n, err := fabric.New(fabric.Config{Component: "wrk-server-qemu", Identity: id, Listen: addr,
				Policy: trust.NewPolicy(trust.Worker, ring, trust.OnRack(rack))})
			if err != nil {
				t.Fatal(err)
			}
			addr = n.Addr() // the agents dial it there, the next worker too
			w, err := qemuworker.New(qemuworker.Config{Rack: rack, Location: "local", GPUModel: "H100", Nodes: 1, GPUsPerNode: 1, Dir: dir, MaxBoots: 1},
				qemuworker.Options{Images: qemu.Catalogue{"debian-12": im}, AgentBinary: agentBin, Relay: relay, Node: n, Keys: ring,
					Reporter: rec, Logs: logs})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			stop = func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run = %v", err)
				}
				n.Close()
			}
			return w
		}
		w := start()
		t.Cleanup(func() { stop() })
		return &workertest.Rack{
			Worker:  w,
			Reports: rec,
			Job: func() cosmic.Job {
				return cosmic.Job{ID: cosmic.NewJobID(), Team: "t", Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer, Location: "local",
					Image: "debian-12", DiskGB: 10, Resources: cosmic.Resources{GPU: 1}}}
			},
			Place: func(j cosmic.Job, replica int) cosmic.Reservation {
				return cosmic.Reservation{JobID: j.ID, Replica: replica, Rack: rack, Nodes: []cosmic.NodeAlloc{{Node: rack + "-node-0", GPUs: []int{0}}}}
			},
			// The replica's root disk is its overlay on the base image: a
			// new file is a new disk.
			RootDisk: func(job string, replica int) string {
				var st unix.Statx_t
				path := filepath.Join(dir, fmt.Sprintf("%s-r%d", job, replica), qemu.OverlayFile)
				if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_INO|unix.STATX_BTIME, &st); err != nil {
					return ""
				}
				return fmt.Sprintf("inode %d, born %d.%09d", st.Ino, st.Btime.Sec, st.Btime.Nsec)
			},
			RestartWorker: func() worker.Worker {
				stop()
				logs.reset()
				w := start()
				// The agent in the adopted VM reaches the new worker, through
				// the new worker's relays, by its next report.
				waittest.NoErrorWithin(t, 2*time.Minute, func() error {
					if !logs.reached() {
						return errors.New("no record of the agent reaching the restarted worker")
					}
					return nil
				}, "the agent in the adopted VM to reach the restarted worker")
				return w
			},
			Timeout: 10 * time.Minute,
		}
	}, workertest.Chained)
}

// adoptionLogs are a rack's job records in the test's log, noting the
// agent of an adopted VM reaching its new worker.
type adoptionLogs struct {
	testLogs
	mu    sync.Mutex
	heard bool
}

func (l *adoptionLogs) Emit(r joblog.Record) {
	l.testLogs.Emit(r)
	if strings.Contains(r.Line, "the agent in the adopted VM reached the restarted worker") {
		l.mu.Lock()
		l.heard = true
		l.mu.Unlock()
	}
}

func (l *adoptionLogs) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.heard = false
}

func (l *adoptionLogs) reached() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.heard
}

// testLogs writes a rack's job records to the test's log.
type testLogs struct{ t *testing.T }

func (l testLogs) Emit(r joblog.Record) {
	l.t.Logf("%s r%d %s: %s", r.JobID[:8], r.Replica, r.Step, r.Line)
}
