package systest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/store/postgres"
	"github.com/cosmicac/cosmicac/internal/store/postgres/pgtest"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// The lease of the fault tests: short, so that a takeover is quick. The
// takeover bound is TTL + Renew (docs/store.md) plus the new leader's
// start; the tests fail only past that bound with a generous margin.
const (
	faultLeaseTTL   = 2 * time.Second
	faultLeaseRenew = 500 * time.Millisecond
	takeoverBound   = faultLeaseTTL + faultLeaseRenew
	takeoverMargin  = 20 * time.Second
)

// TestOrkTakeoverAfterKill: two orks on one PostgreSQL database, two
// app-nodes and a simulated rack, as processes. Clients create jobs
// through both app-nodes while the leading ork is killed (SIGKILL); the
// follower takes over within the bound, every acknowledged job is there,
// no GPU is claimed twice and the jobs were placed in the queue's order.
func TestOrkTakeoverAfterKill(t *testing.T) { orkTakeover(t, faultKill) }

// TestOrkTakeoverAfterItsDatabaseIsCut is the same with the leader's
// connection to the database black-holed by a proxy instead: the leader
// steps down on its own (its process ends) and the follower takes over.
func TestOrkTakeoverAfterItsDatabaseIsCut(t *testing.T) { orkTakeover(t, faultCut) }

// TestOrkTakeoverAfterTheLeaderFreezes (issue 42) is the same with the
// leader, listed first in every --ork, frozen (SIGSTOP: what a host that
// drops every packet looks like): its peers' connections to it idle out,
// their dials move past its address to the follower once it leads, and
// creates succeed again; resumed, the deposed leader finds its term gone,
// commits nothing more and exits.
func TestOrkTakeoverAfterTheLeaderFreezes(t *testing.T) { orkTakeover(t, faultFreeze) }

type fault int

const (
	faultKill   fault = iota // SIGKILL
	faultCut                 // its database connection black-holed
	faultFreeze              // SIGSTOP, SIGCONT after the takeover
)

func orkTakeover(t *testing.T, f fault) {
	cut := f == faultCut
	dsn := pgtest.DSN(t)
	base := t.TempDir()
	dirs, keys := identities(t, base, "ork1", "app1", "app2", "sim")
	// The orks share one identity: peers reach whichever leads.
	dirs["ork2"] = filepath.Join(base, "ork2")
	idFile, err := os.ReadFile(filepath.Join(dirs["ork1"], fabric.IdentityFile))
	if err != nil {
		t.Fatal(err)
	}
	shareIdentity(t, dirs["ork2"], idFile)
	addr1, addr2 := freePort(t), freePort(t)
	orkPeer := keys["ork1"].String() + "@" + addr1 + "," + addr2

	dsn1 := dsn
	var proxy *dbProxy
	if cut {
		proxy, dsn1 = newDBProxy(t, dsn)
	}
	orkArgs := func(dir, addr, db string) []string {
		return []string{"wrk-ork", "--data-dir", dir, "--listen", addr, "--database", db,
			"--app-node-key", keys["app1"].String(), "--app-node-key", keys["app2"].String(), "--heartbeat", "50ms",
			"--lease-ttl", faultLeaseTTL.String(), "--lease-renew", faultLeaseRenew.String()}
	}
	ork1, led1 := startOrk(t, orkArgs(dirs["ork1"], addr1, dsn1)...)
	select {
	case <-led1:
	case <-time.After(60 * time.Second):
		t.Fatal("the first ork does not lead")
	}
	if f == faultKill {
		sameHolder(t, orkArgs(filepath.Join(base, "ork3"), freePort(t), dsn), idFile, ork.DefaultHolder(dirs["ork1"]))
	}
	_, led2 := startOrk(t, orkArgs(dirs["ork2"], addr2, dsn)...)

	sim := component(t, []string{"fabric"}, "wrk-server-sim", "--data-dir", dirs["sim"], "--listen", "127.0.0.1:0",
		"--ork", orkPeer, "--step", "5ms", "--rack", "r1", "--location", "eu", "--nodes", "4", "--gpus-per-node", "8")["fabric"]
	var apis []string
	for _, a := range []string{"app1", "app2"} {
		apis = append(apis, component(t, []string{"fabric", "api"}, "app-node", "--data-dir", dirs[a], "--listen", "127.0.0.1:0",
			"--ork", orkPeer, "--api-listen", freePort(t), "--database", dsn)["api"])
	}
	tok, err := os.ReadFile(filepath.Join(dirs["app1"], "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	var clients []*client.Client
	for _, api := range apis {
		clients = append(clients, client.New(strings.TrimSuffix(api, "/api/v1"), strings.TrimSpace(string(tok))))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, simAddrs, err := fabric.ParsePeer(sim)
	if err != nil {
		t.Fatal(err)
	}
	rack, err := clients[0].RegisterRack(ctx, apiv1.RegisterRack{ID: "r1", Location: "eu", GPUModel: "GH100_H100_SXM5_80GB",
		WorkerKey: keys["sim"].String(), WorkerAddrs: simAddrs})
	if err != nil {
		t.Fatal(err)
	}
	const gpus = 32
	if !rack.Reachable || rack.GPUs != gpus {
		t.Fatalf("registered rack = %+v, want reachable with %d GPUs", rack, gpus)
	}

	// The burst: clients create one-GPU jobs through both app-nodes, more
	// than the rack holds, until enough were acknowledged after the fault.
	const (
		goroutines = 8
		before     = 20 // acknowledged before the fault
		want       = 60 // acknowledged in all
	)
	var (
		mu       sync.Mutex
		acked    []string
		failures int
		faultAt  time.Time
		backAt   time.Time // the first acknowledgement of a create begun after the fault
		faulted  = make(chan struct{})
		wg       sync.WaitGroup
	)
	for g := range goroutines {
		wg.Go(func() {
			for i := 0; ; i++ {
				mu.Lock()
				n := len(acked)
				mu.Unlock()
				if n >= want || ctx.Err() != nil {
					return
				}
				c := clients[(g+i)%len(clients)]
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				began := time.Now()
				j, err := c.CreateJob(cctx, cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: fmt.Sprintf("b-%d-%d", g, i), Location: "eu",
					Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: 1}})
				ccancel()
				mu.Lock()
				if err == nil {
					acked = append(acked, j.ID)
					if !faultAt.IsZero() && began.After(faultAt) && backAt.IsZero() {
						backAt = time.Now()
					}
				} else {
					failures++
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(50 * time.Millisecond) // the API is down during the takeover
				}
			}
		})
	}
	end, _ := ctx.Deadline()
	waittest.NoErrorWithin(t, time.Until(end), func() error {
		mu.Lock()
		defer mu.Unlock()
		if n := len(acked); n < before {
			return fmt.Errorf("only %d jobs acknowledged", n)
		}
		return nil
	}, "%d jobs acknowledged before the fault", before)
	mu.Lock()
	faultAt = time.Now()
	mu.Unlock()
	switch f {
	case faultCut:
		proxy.Cut()
	case faultKill:
		ork1.Process.Signal(syscall.SIGKILL)
	case faultFreeze:
		ork1.Process.Signal(syscall.SIGSTOP)
		defer ork1.Process.Signal(syscall.SIGCONT) // however the test ends: its cleanup interrupts it
	}
	close(faulted)
	var tookOver time.Duration
	select {
	case at := <-led2:
		tookOver = at.Sub(faultAt)
	case <-time.After(takeoverBound + takeoverMargin):
		t.Fatalf("the follower did not lead within %s of the fault", takeoverBound+takeoverMargin)
	}
	t.Logf("the follower led %s after the fault (bound %s, plus its start)", tookOver, takeoverBound)
	if f == faultFreeze {
		// Creates succeed again: the peers' connections to the frozen
		// leader idle out (QUIC, 6 s) and their dials reach the follower.
		const bound = takeoverBound + 6*time.Second + time.Second
		waittest.NoErrorWithin(t, bound+takeoverMargin, func() error {
			mu.Lock()
			defer mu.Unlock()
			if backAt.IsZero() {
				return errors.New("no create begun after the fault was acknowledged")
			}
			return nil
		}, "creates to succeed again while the leader is frozen (bound %s: the takeover, the QUIC idle timeout, one address delay)", bound)
		ork1.Process.Signal(syscall.SIGCONT)
	}
	if f != faultKill {
		// The cut-off (or resumed) leader stepped down: its process
		// ended, with an error saying why.
		exited := make(chan error, 1)
		go func() { exited <- ork1.Wait() }()
		select {
		case err := <-exited:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Errorf("the deposed leader ended with %v; want a failure exit", err)
			}
		case <-time.After(time.Minute):
			// It left the fabric when it stepped down (the follower
			// leads); its process ends once its calls in flight do.
			t.Errorf("the deposed leader's process did not end")
		}
	}
	wg.Wait()
	mu.Lock()
	if !backAt.IsZero() {
		t.Logf("creates succeeded again %s after the fault", backAt.Sub(faultAt))
	}
	t.Logf("%d jobs acknowledged, %d creates failed", len(acked), failures)
	if len(acked) < want {
		t.Fatalf("only %d jobs acknowledged", len(acked))
	}
	mu.Unlock()

	st, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lease, err := st.GetLease(ctx, ork.LeaseName)
	if err != nil || lease.Epoch != 2 || !strings.HasSuffix(lease.Holder, dirs["ork2"]) {
		t.Errorf("lease = %+v (%v); want epoch 2 held by the second ork", lease, err)
	}
	// The GPUs fill up (the follower places what was queued), and the
	// placed jobs run: the rack's reports reach the new leader.
	var jobs []cosmic.Job
	var res []cosmic.Reservation
	waittest.NoErrorWithin(t, time.Until(end), func() error {
		jobs, res = dbJobs(t, st), nil
		if res, err = st.Reservations(ctx); err != nil {
			t.Fatal(err)
		}
		running := 0
		for _, j := range jobs {
			if j.Status.State == cosmic.StateRunning {
				running++
			}
		}
		if len(res) != min(gpus, len(jobs)) || running != len(res) {
			return fmt.Errorf("%d reservations and %d running of %d jobs", len(res), running, len(jobs))
		}
		return nil
	}, "the GPUs to fill up with running jobs")
	checkAfterTakeover(t, acked, jobs, res, rack.GPUs)
}

// checkAfterTakeover: every acknowledged job is stored; no GPU is
// claimed twice nor past the rack; the placed jobs are the oldest (one
// team, one-GPU jobs: the fair queue places them in creation order).
func checkAfterTakeover(t *testing.T, acked []string, jobs []cosmic.Job, res []cosmic.Reservation, gpus int) {
	t.Helper()
	stored := map[string]cosmic.Job{}
	for _, j := range jobs {
		stored[j.ID] = j
	}
	for _, id := range acked {
		if _, ok := stored[id]; !ok {
			t.Errorf("acknowledged job %s is not stored", id)
		}
	}
	if msg := claimedTwice(res, gpus); msg != "" {
		t.Error(msg)
	}
	placed := map[string]bool{}
	for _, r := range res {
		placed[r.JobID] = true
	}
	// jobs are in creation order.
	unplaced := ""
	for _, j := range jobs {
		switch {
		case j.Status.State == cosmic.StateFailed:
			t.Errorf("job %s failed: %+v", j.ID, j.Status.Reason)
		case !placed[j.ID]:
			if unplaced == "" {
				unplaced = j.ID
			}
			if j.Status.State != cosmic.StateQueued {
				t.Errorf("job %s holds no GPU but is %s", j.ID, j.Status.State)
			}
		case unplaced != "":
			t.Errorf("job %s (created %s) was placed before the older %s", j.ID, j.CreatedAt.Format(time.RFC3339Nano), unplaced)
		}
	}
}

// dbJobs lists every job of the database, oldest first.
func dbJobs(t *testing.T, st *postgres.Store) []cosmic.Job {
	t.Helper()
	jobs, err := listJobs(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

// listJobs lists every job of the database, oldest first.
func listJobs(ctx context.Context, st *postgres.Store) ([]cosmic.Job, error) {
	var out []cosmic.Job
	for page := 0; ; page++ {
		jobs, total, err := st.ListJobs(ctx, store.ListJobsQuery{Sort: store.SortCreatedAt, Order: store.OrderAsc, Page: page, Size: store.MaxPageSize})
		if err != nil {
			return nil, err
		}
		out = append(out, jobs...)
		if len(jobs) == 0 || len(out) >= total {
			return slices.Clip(out), nil
		}
	}
}

// sameHolder runs an ork given the leading ork's --lease-holder (a copied
// config; issue 42) beside it for three TTLs: it must say why it does not
// lead, and never lead.
func sameHolder(t *testing.T, args []string, identity []byte, holder string) {
	t.Helper()
	shareIdentity(t, args[slices.Index(args, "--data-dir")+1], identity)
	cmd := exec.Command(os.Args[0], append(args, "--lease-holder", holder)...)
	cmd.Env = append(os.Environ(), "COSMICAC_TEST_MAIN=1")
	var out, errs lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	const why = "another live process leads under this ork's holder name"
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(errs.String(), why); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("an ork given the leader's holder name %q does not say why it follows:\n%s", holder, errs.String())
		}
	}
	time.Sleep(3 * faultLeaseTTL)
	if strings.Contains(out.String(), "fabric ") {
		t.Fatalf("an ork given the leader's holder name led beside it:\n%s\n%s", out.String(), errs.String())
	}
}

// startOrk starts a wrk-ork process; the channel gets the time it printed
// its fabric line, that is, began to lead.
func startOrk(t *testing.T, args ...string) (*exec.Cmd, <-chan time.Time) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	out := startMain(t, cmd)
	t.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	led := make(chan time.Time, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "fabric ") {
				led <- time.Now()
			}
		}
	}()
	return cmd, led
}

// dbProxy forwards TCP connections to the database until Cut, after which
// it black-holes them: what is sent is dropped, nothing comes back, new
// connections are accepted and never answered.
type dbProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

// newDBProxy proxies the database of dsn and returns the DSN through it.
func newDBProxy(t *testing.T, dsn string) (*dbProxy, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return newDBProxyOn(t, ln, dsn)
}

// newDBProxyOn is newDBProxy serving on ln.
func newDBProxyOn(t *testing.T, ln net.Listener, dsn string) (*dbProxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := &dbProxy{ln: ln, target: u.Host}
	t.Cleanup(p.close)
	go p.serve()
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *dbProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		cut := p.cut
		p.mu.Unlock()
		if cut {
			go io.Copy(io.Discard, c) //nolint:errcheck // black hole
			continue
		}
		d, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, d)
		p.mu.Unlock()
		go p.pipe(c, d)
		go p.pipe(d, c)
	}
}

// pipe copies from src to dst until Cut, then drops what src sends. When
// src ends, so does dst, as over a network that carries a FIN: a client
// that closed its connection mid-transaction must not leave PostgreSQL
// holding the transaction's locks (until Cut: a black hole carries none).
func (p *dbProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			p.mu.Lock()
			cut := p.cut
			p.mu.Unlock()
			if !cut {
				dst.Close()
			}
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// Cut black-holes every connection, open and new.
func (p *dbProxy) Cut() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
}

func (p *dbProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}
