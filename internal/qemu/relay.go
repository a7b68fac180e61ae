package qemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cosmicac/cosmicac/internal/qemu/handoff"
)

// RelaySocket is the unix socket in a VM's directory on which the process
// that starts the VM (the worker) takes the VM's guest connections to its
// forwards from Config.Relay (internal/qemu/handoff).
const RelaySocket = "relay.sock"

// DefaultMaxConns is a VM's default cap on the guest connections to its
// forwards relayed at once (Config.MaxConns).
const DefaultMaxConns = 64

// RelayStats counts a VM's guest connections to its forwards.
type RelayStats struct {
	// Open are relayed now; Relayed and Refused (over Config.MaxConns)
	// since the VM started.
	Open             int
	Relayed, Refused uint64
}

// relays takes a VM's guest connections from handoff.Send and relays each to
// its forward's host address, at most max at once: one more is reset at
// once and counted. The guest reaches nothing but the forwards' host
// addresses: the guest address handoff.Send names picks one of them.
type relays struct {
	path      string
	ln        *net.UnixListener
	hosts     map[string]string // guest address -> host address
	max       int
	onRefused func(guest string)
	ctx       context.Context // ends at close: a dial in progress gives up
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	stats  RelayStats
	closed bool
}

// listenRelays listens on the VM's relay socket (a stale one removed).
func listenRelays(c Config) (*relays, error) {
	r := &relays{path: filepath.Join(c.Dir, RelaySocket), hosts: map[string]string{}, max: c.MaxConns,
		onRefused: c.OnRefused, conns: map[net.Conn]struct{}{}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	if r.max <= 0 {
		r.max = DefaultMaxConns
	}
	for _, f := range c.Forwards {
		r.hosts[f.GuestAddr] = f.HostAddr
	}
	os.Remove(r.path)
	err := handoff.WithShortPath(r.path, func(p string) error {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		if err == nil {
			ln.SetUnlinkOnClose(false) // p may name the directory by a descriptor since closed
			r.ln = ln
		}
		return err
	})
	if err != nil {
		r.cancel()
		return nil, fmt.Errorf("qemu: relay socket: %w", err)
	}
	r.wg.Add(1)
	go r.serve()
	return r, nil
}

func (r *relays) serve() {
	defer r.wg.Done()
	for {
		uc, err := r.ln.AcceptUnix()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // out of descriptors: the relays wait in the backlog
			time.Sleep(10 * time.Millisecond)
			continue
		}
		conn, guest, err := receive(uc)
		uc.Close()
		if err == nil {
			r.admit(conn, guest)
		}
	}
}

// receive reads handoff.Send's message: the guest address, with one socket.
func receive(uc *net.UnixConn) (net.Conn, string, error) {
	uc.SetDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 64)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, "", err
	}
	var fds []int
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	for _, m := range msgs {
		rights, rerr := syscall.ParseUnixRights(&m)
		err = errors.Join(err, rerr)
		fds = append(fds, rights...)
	}
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return nil, "", fmt.Errorf("qemu relay: %d descriptors (%v), want 1", len(fds), err)
	}
	f := os.NewFile(uintptr(fds[0]), "guest")
	defer f.Close()
	conn, err := net.FileConn(f)
	if err != nil {
		return nil, "", err
	}
	if _, ok := conn.(closeWriter); !ok {
		conn.Close()
		return nil, "", errors.New("qemu relay: not a stream socket")
	}
	return conn, string(buf[:n]), nil
}

type closeWriter interface{ CloseWrite() error }

// admit relays conn to its forward's host address, or resets it when the
// VM has max connections open.
func (r *relays) admit(conn net.Conn, guest string) {
	host, ok := r.hosts[guest]
	r.mu.Lock()
	if !ok || r.closed || r.stats.Open >= r.max {
		refused := ok && !r.closed
		if refused {
			r.stats.Refused++
		}
		r.mu.Unlock()
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0) // a reset: the guest's read fails at once
		}
		conn.Close()
		if refused && r.onRefused != nil {
			r.onRefused(guest)
		}
		return
	}
	r.stats.Open++
	r.stats.Relayed++
	r.conns[conn] = struct{}{}
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		r.relay(conn, host)
		r.mu.Lock()
		delete(r.conns, conn)
		r.stats.Open--
		r.mu.Unlock()
	}()
}

// relay copies between the guest's conn and a connection to host until
// the host's side ends; the guest's ending half-closes the host's side,
// which may answer still.
func (r *relays) relay(conn net.Conn, host string) {
	defer conn.Close()
	d := net.Dialer{Timeout: 10 * time.Second}
	hc, err := d.DialContext(r.ctx, "tcp", host)
	if err != nil {
		return
	}
	defer hc.Close()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.conns[hc] = struct{}{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.conns, hc)
		r.mu.Unlock()
	}()
	up := make(chan struct{})
	go func() {
		defer close(up)
		if _, err := io.Copy(hc, conn); err != nil {
			hc.Close() // the guest's side broke: nothing more to answer
			return
		}
		hc.(closeWriter).CloseWrite()
	}()
	io.Copy(conn, hc)
	conn.Close()
	hc.Close()
	<-up
}

// Stats counts the connections.
func (r *relays) Stats() RelayStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// close stops taking connections, ends the open ones and waits for them;
// once (a released VM's relays close at Release, and never after).
func (r *relays) close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.cancel()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.ln.Close()
	r.wg.Wait()
	os.Remove(r.path)
}

// shellQuote quotes s for g_shell_parse_argv, which libslirp splits a
// guestfwd command with, when it has more than letters, digits and
// /._:@=+-.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._:@=+-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
