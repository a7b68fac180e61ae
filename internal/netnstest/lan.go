package netnstest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cosmicac/cosmicac/internal/testenv"
)

// LAN is several test hosts on one switch: a network namespace per host,
// each joined by a veth pair to a bridge in a namespace of its own, each
// with one address of 198.18.0.0/24 (RFC 2544's benchmark range; nothing
// leaves the namespaces). A partition between hosts is real: iptables in
// both hosts' namespaces drops what arrives from the other (Drop), so open
// connections black-hole as they would across a cut link.
type LAN struct {
	hosts map[string]*Host
}

// Host is one namespace of a LAN.
type Host struct {
	// Name is the host's name in the test; NS the namespace's, for
	// `ip netns exec`; IP its address on the LAN.
	Name, NS, IP string
	cut          []*Host // Drop's, for Heal; not for concurrent use
}

// NewLAN makes a LAN of the named hosts (at most 200), the i-th with the
// address 198.18.0.(10+i); t's cleanup removes every namespace. It needs
// root, iproute2's ip and iptables: without them the test is skipped, or
// fails where CI is set. Under -short the test is skipped.
func NewLAN(t testing.TB, prefix string, hosts ...string) *LAN {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping the test on network namespaces")
	}
	if os.Geteuid() != 0 {
		SkipOrFail(t, fmt.Sprintf("needs root to create network namespaces (euid %d)", os.Geteuid()))
	}
	testenv.RequireCommands(t, "hack/install-deps.sh installs them", "ip", "iptables")
	if len(hosts) > 200 {
		t.Fatalf("netnstest.NewLAN: %d hosts; at most 200", len(hosts))
	}
	tag := fmt.Sprint(os.Getpid())
	sw := prefix + "sw" + tag
	if err := IP("netns", "add", sw); err != nil {
		SkipOrFail(t, "cannot create a network namespace: "+err.Error())
	}
	t.Cleanup(func() { IP("netns", "del", sw) })
	for _, args := range [][]string{
		{"-n", sw, "link", "add", "br0", "type", "bridge"},
		{"-n", sw, "link", "set", "br0", "up"},
	} {
		if err := IP(args...); err != nil {
			t.Fatal(err)
		}
	}
	l := &LAN{hosts: map[string]*Host{}}
	for i, name := range hosts {
		h := &Host{Name: name, NS: fmt.Sprintf("%sh%d-%s", prefix, i, tag), IP: fmt.Sprintf("198.18.0.%d", 10+i)}
		if err := IP("netns", "add", h.NS); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { IP("netns", "del", h.NS) })
		// Both ends are made inside their namespaces (names there are
		// the namespace's own); deleting a namespace deletes the pair.
		port := fmt.Sprintf("p%d", i)
		for _, args := range [][]string{
			{"link", "add", "eth0", "netns", h.NS, "type", "veth", "peer", "name", port, "netns", sw},
			{"-n", sw, "link", "set", port, "master", "br0"},
			{"-n", sw, "link", "set", port, "up"},
			{"-n", h.NS, "addr", "add", h.IP + "/24", "dev", "eth0"},
			{"-n", h.NS, "link", "set", "lo", "up"},
			{"-n", h.NS, "link", "set", "eth0", "up"},
		} {
			if err := IP(args...); err != nil {
				t.Fatal(err)
			}
		}
		l.hosts[name] = h
	}
	return l
}

// Host returns the named host; it panics on a name NewLAN was not given.
func (l *LAN) Host(name string) *Host {
	h, ok := l.hosts[name]
	if !ok {
		panic("netnstest: no host " + name)
	}
	return h
}

// Command is exec.Command run inside h's namespace (`ip netns exec`, which
// execs name: the process's PID is name's own, for signals).
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
}

// in runs f on an OS thread that has entered h's namespace: sockets f
// opens are the namespace's, and stay so when used from other threads.
func (h *Host) in(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(self)
		ns, err := unix.Open("/run/netns/"+h.NS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(ns)
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering %s: %w", h.NS, err)
			return
		}
		ferr := f()
		// Back to the thread's own namespace; if that fails, the thread
		// stays locked and ends with this goroutine.
		if unix.Setns(self, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

// DialContext dials addr from inside h's namespace; it fits
// http.Transport.DialContext.
func (h *Host) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.in(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen listens on addr inside h's namespace.
func (h *Host) Listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := h.in(func() (err error) {
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// Drop cuts h off from the given hosts, both ways, as a black hole in the
// network would: each host's namespace drops what arrives from the other
// (iptables INPUT), so that sending still succeeds locally and nothing
// arrives; open connections go silent, nothing is refused or reset.
func (h *Host) Drop(from ...*Host) error {
	for _, o := range from {
		if err := h.iptables("-A", "INPUT", "-s", o.IP, "-j", "DROP"); err != nil {
			return err
		}
		if err := o.iptables("-A", "INPUT", "-s", h.IP, "-j", "DROP"); err != nil {
			return err
		}
		h.cut = append(h.cut, o)
	}
	return nil
}

// Heal undoes every Drop of h.
func (h *Host) Heal() error {
	for _, o := range h.cut {
		if err := h.iptables("-D", "INPUT", "-s", o.IP, "-j", "DROP"); err != nil {
			return err
		}
		if err := o.iptables("-D", "INPUT", "-s", h.IP, "-j", "DROP"); err != nil {
			return err
		}
	}
	h.cut = nil
	return nil
}

func (h *Host) iptables(args ...string) error {
	out, err := exec.Command("ip", append([]string{"netns", "exec", h.NS, "iptables", "-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s in %s: %v: %s", strings.Join(args, " "), h.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}
