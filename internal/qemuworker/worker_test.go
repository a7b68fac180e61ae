package qemuworker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/qemu"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/vmboot"
	"github.com/cosmicac/cosmicac/internal/waittest"
	"github.com/cosmicac/cosmicac/internal/worker"
	"github.com/cosmicac/cosmicac/internal/worker/workertest"
)

// TestGuestPeersPortsOfTheirOwn: each distinct host address gets a guest
// port of its own from GuestPortBase, whatever the host ports are: host
// ports 45016 and 55471 (whose bytes are each other's swapped, a pair
// libslirp refuses) become 7001 and 7002; an address two peers share, and
// 0.0.0.0, are forwarded once; the worker itself comes last.
func TestGuestPeersPortsOfTheirOwn(t *testing.T) {
	id, err := fabric.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	n, err := fabric.New(fabric.Config{Component: "wrk-qemu", Identity: id, Listen: "127.0.0.1:0", Policy: fabric.NewAllowList()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	w := &Worker{opts: Options{Node: n, Peers: []vmboot.Peer{
		{Role: agentapi.RoleDirectory, Key: "d", Addrs: []string{"127.0.0.1:45016"}},
		{Role: agentapi.RoleAppNode, Key: "a", Addrs: []string{"0.0.0.0:55471", "127.0.0.1:45016"}},
		{Role: agentapi.RoleMonitor, Key: "m", Addrs: []string{"[::1]:45016"}},
	}}}
	peers, fwd, err := w.guestPeers()
	if err != nil {
		t.Fatal(err)
	}
	want := []qemu.Forward{
		{GuestAddr: "10.0.2.100:7001", HostAddr: "127.0.0.1:45016"},
		{GuestAddr: "10.0.2.100:7002", HostAddr: "127.0.0.1:55471"},
		{GuestAddr: "10.0.2.100:7003", HostAddr: "[::1]:45016"},
		{GuestAddr: "10.0.2.100:7004", HostAddr: n.Addr()},
	}
	if len(fwd) != len(want) {
		t.Fatalf("forwards %v, want %v", fwd, want)
	}
	for i := range want {
		if fwd[i] != want[i] {
			t.Errorf("forward %d: %v, want %v", i, fwd[i], want[i])
		}
	}
	wantAddrs := [][]string{{"10.0.2.100:7001"}, {"10.0.2.100:7002", "10.0.2.100:7001"}, {"10.0.2.100:7003"}, {"10.0.2.100:7004"}}
	if len(peers) != len(wantAddrs) || peers[3].Role != agentapi.RoleWorker || peers[3].Key != n.PublicKey().String() {
		t.Fatalf("peers %+v", peers)
	}
	for i, p := range peers {
		if len(p.Addrs) != len(wantAddrs[i]) {
			t.Errorf("peer %s: %v, want %v", p.Role, p.Addrs, wantAddrs[i])
			continue
		}
		for j := range p.Addrs {
			if p.Addrs[j] != wantAddrs[i][j] {
				t.Errorf("peer %s: %v, want %v", p.Role, p.Addrs, wantAddrs[i])
			}
		}
	}
	if err := qemu.CheckForwards(fwd); err != nil {
		t.Error(err)
	}
}

// TestDirTooLongForSockets: a rack directory too long for its VMs' unix
// sockets is refused when the worker is made, not when a VM fails to
// start.
func TestDirTooLongForSockets(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "cosmicac")
	if err := os.WriteFile(bin, []byte("agent"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir string
		ok  bool
	}{
		{"/var/lib/cosmicac/vms", true},
		{"/" + strings.Repeat("d", 40), true},
		{"/" + strings.Repeat("d", 60), false},
	} {
		id, err := fabric.GenerateIdentity()
		if err != nil {
			t.Fatal(err)
		}
		n, err := fabric.New(fabric.Config{Component: "wrk-qemu", Identity: id, Listen: "127.0.0.1:0", Policy: fabric.NewAllowList()})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		_, err = New(Config{Rack: "q1", Location: "local", GPUModel: "H100", Nodes: 1, GPUsPerNode: 1, Dir: tc.dir, Accel: "tcg"},
			Options{AgentBinary: bin, Relay: []string{"relay"}, Node: n, Keys: trust.NewKeyring(), Reporter: noReporter{}})
		if ok := err == nil; ok != tc.ok || !ok && !strings.Contains(err.Error(), "too long") {
			t.Errorf("dir %s (%d bytes): %v, want ok %v", tc.dir, len(tc.dir), err, tc.ok)
		}
	}
}

// TestRestartOfAnUnknownJobIsNotFound: as every rack kind answers (the
// conformance suite's check, which found the QEMU worker answering nil).
func TestRestartOfAnUnknownJobIsNotFound(t *testing.T) {
	w, _ := newTestWorker(t)
	for _, replica := range []int{worker.AllReplicas, 0} {
		err := w.Restart(t.Context(), worker.ReplicaRef{JobID: cosmic.NewJobID(), Replica: replica})
		if fabric.ErrorCode(err) != fabric.CodeNotFound {
			t.Errorf("replica %d: %v, want not_found", replica, err)
		}
	}
}

// TestDeleteOfReplicasNotHeld: a Delete names a replica the worker never
// applied: it is reported gone (as every rack kind does); a job's replica
// directories left by an earlier worker go, each reported gone.
func TestDeleteOfReplicasNotHeld(t *testing.T) {
	w, _ := newTestWorker(t)
	rec := &workertest.Recorder{}
	w.opts.Reporter = rec
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	job := cosmic.NewJobID()
	left := filepath.Join(w.cfg.Dir, job+"-r1")
	if err := os.MkdirAll(left, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := w.Delete(t.Context(), worker.DeleteParams{JobID: job, Replica: 3}); err != nil {
		t.Fatal(err)
	}
	if err := w.Delete(t.Context(), worker.DeleteParams{JobID: job, Replica: worker.AllReplicas}); err != nil {
		t.Fatal(err)
	}
	for _, replica := range []int{3, 1} {
		waittest.NoErrorWithin(t, waittest.Timeout, func() error {
			if r, ok := rec.Last(job, replica); !ok || !r.Gone {
				return fmt.Errorf("last report %+v", r)
			}
			return nil
		}, "replica %d reported gone", replica)
	}
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the left replica's directory: %v, want it gone", err)
	}
}

// TestAdoptedForwardsFollowThePeers: an adopted VM keeps the guest
// addresses it was started with, each forwarded to where its peer (by role
// and key) is now: the app-node moved, the worker itself too (a new port
// after its restart); a peer the worker no longer knows (the directory's
// key changed) keeps the host address it had.
func TestAdoptedForwardsFollowThePeers(t *testing.T) {
	id, err := fabric.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	n, err := fabric.New(fabric.Config{Component: "wrk-qemu", Identity: id, Listen: "127.0.0.1:0", Policy: fabric.NewAllowList()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	self := id.PublicKey().String()
	rec := record{
		Peers: []vmboot.Peer{
			{Role: agentapi.RoleDirectory, Key: "d", Addrs: []string{"10.0.2.100:7001"}},
			{Role: agentapi.RoleAppNode, Key: "a", Addrs: []string{"10.0.2.100:7002", "10.0.2.100:7001"}},
			{Role: agentapi.RoleWorker, Key: self, Addrs: []string{"10.0.2.100:7003"}},
		},
		Forwards: []qemu.Forward{
			{GuestAddr: "10.0.2.100:7001", HostAddr: "127.0.0.1:4001"},
			{GuestAddr: "10.0.2.100:7002", HostAddr: "127.0.0.1:4002"},
			{GuestAddr: "10.0.2.100:7003", HostAddr: "127.0.0.1:4003"},
		},
	}
	w := &Worker{opts: Options{Node: n, Peers: []vmboot.Peer{
		{Role: agentapi.RoleDirectory, Key: "d2", Addrs: []string{"127.0.0.1:5001"}},
		{Role: agentapi.RoleAppNode, Key: "a", Addrs: []string{"0.0.0.0:5002", "127.0.0.1:5001"}},
	}}}
	got := w.adoptedForwards(rec)
	want := []qemu.Forward{
		{GuestAddr: "10.0.2.100:7001", HostAddr: "127.0.0.1:5001"}, // the app-node's second address: where the guest's 7001 leads it now
		{GuestAddr: "10.0.2.100:7002", HostAddr: "127.0.0.1:5002"},
		{GuestAddr: "10.0.2.100:7003", HostAddr: n.Addr()},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("adopted forwards %v, want %v", got, want)
	}
	rec.Peers[1].Key = "a-old" // the app-node unknown now too: 7001 and 7002 keep their hosts
	got = w.adoptedForwards(rec)
	if got[0].HostAddr != "127.0.0.1:4001" || got[1].HostAddr != "127.0.0.1:4002" {
		t.Errorf("forwards of peers the worker no longer knows: %v; want their old host addresses", got)
	}
}

// TestParseReplicaDir: a replica's directory names its job and replica;
// nothing else in the rack's directory does.
func TestParseReplicaDir(t *testing.T) {
	id := cosmic.NewJobID()
	for name, want := range map[string]bool{id + "-r0": true, id + "-r12": true, ".agent": false, ".engine": false,
		id + "-r": false, id + "-r-1": false, "x-r0": false, id: false} {
		job, n, ok := parseReplicaDir(name)
		if ok != want || ok && (job != id || fmt.Sprintf("%s-r%d", job, n) != name) {
			t.Errorf("parseReplicaDir(%q) = %q, %d, %v; want ok %v", name, job, n, ok, want)
		}
	}
}
