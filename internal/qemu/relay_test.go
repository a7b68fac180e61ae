package qemu

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/qemu/handoff"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// TestRelaysCapAndMemory: 200 guest connections to a forward, each made
// as libslirp makes it for guestfwd=…-cmd: (a loopback TCP pair, the
// forward's command run on one end in a session of its own; the test
// binary is the command, `qemu-relay` run by internal/qemu/handoff's init): the first
// 64 (the cap) reach the host's port and back, the rest are reset at once
// and counted; once they are open no relay process is left, and the
// worker's own memory for them stays under 8 MiB. A guest closing its
// side ends the relay once the host has answered. The VM's directory is
// longer than a unix socket's address.
func TestRelaysCapAndMemory(t *testing.T) {
	const conns, max = 200, 64
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	go func() {
		for {
			c, err := host.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	c := Config{Dir: dir, Relay: []string{os.Args[0], handoff.Command}, MaxConns: max,
		Forwards: []Forward{{GuestAddr: "10.0.2.100:7001", HostAddr: host.Addr().String()}}}
	refusedHook := make(chan string, conns)
	c.OnRefused = func(guest string) { refusedHook <- guest }
	argv := guestfwdCommand(t, c, "10.0.2.100:7001")

	before := workerMemory()
	r, err := listenRelays(c)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()

	var guests []net.Conn
	var relays []*relayProc
	defer func() {
		for _, g := range guests {
			g.Close()
		}
		for _, p := range relays {
			p.kill()
		}
	}()
	var wrong []string
	for i := range conns {
		g, p := slirpExec(t, argv)
		guests, relays = append(guests, g), append(relays, p)
		g.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(g, "ping %d\n", i)
		line, err := bufio.NewReader(g).ReadString('\n')
		relayed := err == nil && line == fmt.Sprintf("ping %d\n", i)
		if relayed != (i < max) {
			wrong = append(wrong, fmt.Sprintf("connection %d: relayed %v (%q, %v)", i+1, relayed, line, err))
		}
		g.SetDeadline(time.Time{})
	}
	if len(wrong) > 0 {
		t.Errorf("want the first %d connections relayed and the rest refused; %d are not so:\n%s", max, len(wrong), strings.Join(wrong[:min(len(wrong), 5)], "\n"))
	}

	// The relays have handed their connections over and exited.
	waittest.Poll(3*time.Second, func() bool { return liveRelays(relays) == 0 }) // what is left is checked below
	n, rss, anon := relayMemory(relays)
	added := workerMemory() - before
	t.Logf("%d guest connections: %d relay processes left (RSS %d KiB, anonymous %d KiB); the worker's heap and stacks grew by %d KiB; %+v",
		conns, n, rss>>10, anon>>10, added>>10, r.Stats())
	if n != 0 || rss > 8<<20 {
		t.Errorf("%d relay processes are left with %d MiB resident; want none", n, rss>>20)
	}
	if added > 8<<20 {
		t.Errorf("the worker's memory grew by %d MiB for %d connections; want at most 8", added>>20, conns)
	}
	if st := r.Stats(); st.Open != max || st.Relayed != max || st.Refused != conns-max {
		t.Errorf("stats %+v; want %d open, %d relayed, %d refused", st, max, max, conns-max)
	}
	if len(refusedHook) != conns-max {
		t.Errorf("OnRefused called %d times; want %d", len(refusedHook), conns-max)
	}

	// The guest's half-close reaches the host, whose answer comes back.
	g := guests[0].(*net.TCPConn)
	fmt.Fprint(g, "last")
	g.CloseWrite()
	g.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(g); string(b) != "last" || err != nil {
		t.Errorf("after the guest's half-close: %q, %v; want the host's answer then EOF", b, err)
	}
	for _, g := range guests {
		g.Close()
	}
	waittest.Poll(5*time.Second, func() bool { return r.Stats().Open == 0 }) // checked below
	if st := r.Stats(); st.Open != 0 {
		t.Errorf("%d connections still open after the guest closed them all", st.Open)
	}
}

// TestRelaysRefuseStrangers: a handoff naming no forward of the VM is
// closed, not counted; relays closed end their connections and remove
// the socket, and a relay run then fails at once.
func TestRelaysRefuseStrangers(t *testing.T) {
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	held := make(chan net.Conn, 1)
	go func() {
		if c, err := host.Accept(); err == nil {
			held <- c
		}
	}()
	c := Config{Dir: t.TempDir(), Relay: []string{os.Args[0], handoff.Command},
		Forwards: []Forward{{GuestAddr: "10.0.2.100:7001", HostAddr: host.Addr().String()}}}
	r, err := listenRelays(c)
	if err != nil {
		t.Fatal(err)
	}
	stranger, p := slirpExec(t, []string{os.Args[0], handoff.Command, filepath.Join(c.Dir, RelaySocket), "10.0.2.100:22"})
	defer p.kill()
	stranger.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := stranger.Read(make([]byte, 1)); err == nil || n > 0 || os.IsTimeout(err) {
		t.Errorf("a connection for 10.0.2.100:22 was not closed: %d, %v", n, err)
	}
	g, p2 := slirpExec(t, guestfwdCommand(t, c, "10.0.2.100:7001"))
	defer p2.kill()
	hc := <-held
	defer hc.Close()
	if st := r.Stats(); st.Open != 1 || st.Relayed != 1 || st.Refused != 0 {
		t.Errorf("stats %+v; want the forward's one connection open, nothing refused", st)
	}
	r.close()
	g.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := g.Read(make([]byte, 1)); err == nil || n > 0 || os.IsTimeout(err) {
		t.Errorf("closing the relays left the guest's connection open: %d, %v", n, err)
	}
	if _, err := os.Stat(filepath.Join(c.Dir, RelaySocket)); !os.IsNotExist(err) {
		t.Errorf("the relay socket is left: %v", err)
	}
	late, p3 := slirpExec(t, guestfwdCommand(t, c, "10.0.2.100:7001"))
	defer p3.kill()
	if err := p3.wait(5 * time.Second); err == nil {
		t.Error("a relay with no worker listening succeeded")
	}
	late.Close()
}

// guestfwdCommand is the command QEMU runs for a connection to guest:
// the guestfwd rule's cmd: of c.Args(), unescaped and split as libslirp
// does (g_shell_parse_argv; the test's arguments need no quotes).
func guestfwdCommand(t *testing.T, c Config, guest string) []string {
	t.Helper()
	args := c.Args()
	for i, a := range args {
		if a != "-netdev" {
			continue
		}
		netdev := strings.ReplaceAll(args[i+1], ",,", "\x00")
		for _, opt := range strings.Split(netdev, ",") {
			if cmd, ok := strings.CutPrefix(opt, "guestfwd=tcp:"+guest+"-cmd:"); ok {
				return strings.Fields(strings.ReplaceAll(cmd, "\x00", ","))
			}
		}
	}
	t.Fatalf("no guestfwd command for %s in %v", guest, args)
	return nil
}

// relayProc is a relay process that slirpExec started.
type relayProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (p *relayProc) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

func (p *relayProc) wait(d time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		return fmt.Errorf("still running after %v", d)
	}
}

// slirpExec makes a guest connection as libslirp's fork_exec does: a
// loopback TCP pair, argv run with one end as its standard input, output
// and error in a session of its own; the other end is the guest's.
func slirpExec(t *testing.T, argv []string) (net.Conn, *relayProc) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	child, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	guest, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	f, err := child.(*net.TCPConn).File()
	child.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = f, f, f
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0") // -race: no second's wait at exit
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &relayProc{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return guest, p
}

func liveRelays(ps []*relayProc) int {
	n := 0
	for _, p := range ps {
		select {
		case <-p.done:
		default:
			n++
		}
	}
	return n
}

// relayMemory is the number of relay processes still running and the sum
// of their resident and anonymous resident memory.
func relayMemory(ps []*relayProc) (n int, rss, anon int64) {
	var mu sync.Mutex
	for _, p := range ps {
		select {
		case <-p.done:
			continue
		default:
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
		if err != nil {
			continue
		}
		mu.Lock()
		n++
		rss += statusKiB(string(b), "VmRSS:") << 10
		anon += statusKiB(string(b), "RssAnon:") << 10
		mu.Unlock()
	}
	return n, rss, anon
}

func statusKiB(status, field string) int64 {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// workerMemory is this process's heap and goroutine stacks in use.
func workerMemory() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse)
}
