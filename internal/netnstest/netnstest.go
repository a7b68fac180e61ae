// Package netnstest builds test hosts on this machine out of network
// namespaces: two joined by a veth pair (New), or several on one switch, a
// bridge in a namespace of its own (NewLAN), where a test can run processes
// "on different hosts" with `ip netns exec`, dial and listen from inside a
// host, and cut hosts off from each other with iptables inside their
// namespaces. Nothing is added to the machine's own namespace. It is for
// tests only (the fabric's, the agent's, the ork's failover).
//
// It needs root and iproute2's `ip` (and iptables for NewLAN). Without them
// the test is skipped with the reason, except when the environment variable
// CI is set: CI runs as root with both installed (hack/install-deps.sh), so
// there the test fails instead of skipping.
package netnstest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/testenv"
)

// Pair is two namespaces joined by a veth pair.
type Pair struct {
	// A and B are the namespaces' names, for `ip netns exec`.
	A, B string
	// IPA and IPB are their addresses on the veth pair (a /24).
	IPA, IPB string
}

// SkipOrFail skips t for reason, or fails it when CI is set.
func SkipOrFail(t testing.TB, reason string) {
	t.Helper()
	testenv.Require(t, false, "%s", reason)
}

// IP runs `ip args...`.
func IP(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// New makes the pair, named from prefix (a few letters: interface names are
// at most 15 bytes) and this process's ID, with ipA and ipB on it; t's
// cleanup removes it. Under -short the test is skipped.
func New(t testing.TB, prefix, ipA, ipB string) Pair {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping the two-namespace test")
	}
	if os.Geteuid() != 0 {
		SkipOrFail(t, fmt.Sprintf("needs root to create network namespaces (euid %d)", os.Geteuid()))
	}
	if _, err := exec.LookPath("ip"); err != nil {
		SkipOrFail(t, "needs the ip command (iproute2): "+err.Error())
	}
	// Names unique to this process: other test runs may share the host.
	tag := fmt.Sprintf("%d", os.Getpid())
	p := Pair{A: prefix + "a" + tag, B: prefix + "b" + tag, IPA: ipA, IPB: ipB}
	vA, vB := prefix+"va"+tag, prefix+"vb"+tag
	if err := IP("netns", "add", p.A); err != nil {
		SkipOrFail(t, "cannot create a network namespace: "+err.Error())
	}
	t.Cleanup(func() { IP("netns", "del", p.A) })
	if err := IP("netns", "add", p.B); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { IP("netns", "del", p.B) })
	// Both ends are created inside their namespaces; deleting a namespace
	// deletes its end and with it the pair. The host-side delete is for an
	// ip that created the pair in the host namespace after all.
	t.Cleanup(func() { exec.Command("ip", "link", "del", vA).Run() })
	for _, args := range [][]string{
		{"link", "add", vA, "netns", p.A, "type", "veth", "peer", "name", vB, "netns", p.B},
		{"-n", p.A, "addr", "add", ipA + "/24", "dev", vA},
		{"-n", p.B, "addr", "add", ipB + "/24", "dev", vB},
		{"-n", p.A, "link", "set", "lo", "up"},
		{"-n", p.B, "link", "set", "lo", "up"},
		{"-n", p.A, "link", "set", vA, "up"},
		{"-n", p.B, "link", "set", vB, "up"},
	} {
		if err := IP(args...); err != nil {
			t.Fatal(err)
		}
	}
	return p
}
