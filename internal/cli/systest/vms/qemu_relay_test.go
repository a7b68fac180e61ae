package vms

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestQEMURelayStartsLight: `cosmicac qemu-relay SOCKET GUEST-ADDR`, which
// libslirp runs for each guest connection, hands its standard input to
// SOCKET with the guest address and exits before the binary's own
// packages initialize (internal/qemu/handoff's init): none of them runs
// its init, and the inits before it allocate under 4 MiB. The test binary
// links what cosmicac links.
func TestQEMURelayStartsLight(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "relay.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	relayEnd, err := net.Dial("tcp", tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	guest, err := tl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer guest.Close()
	f, err := relayEnd.(*net.TCPConn).File()
	relayEnd.Close()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(os.Args[0], "qemu-relay", sock, "10.0.2.100:7001")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = f, f, &stderr
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1", "GORACE=atexit_sleep_ms=0")
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("qemu-relay: %v: %s", err, stderr.String())
	}
	took := time.Since(start)
	f.Close()

	uc, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	buf, oob := make([]byte, 64), make([]byte, syscall.CmsgSpace(4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("control messages %v, %v; want one", msgs, err)
	}
	fds, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 || string(buf[:n]) != "10.0.2.100:7001" {
		t.Fatalf("handoff %q with descriptors %v (%v); want 10.0.2.100:7001 and one", buf[:n], fds, err)
	}
	pf := os.NewFile(uintptr(fds[0]), "guest")
	passed, err := net.FileConn(pf)
	pf.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer passed.Close()
	fmt.Fprint(passed, "hello")
	passed.Close()
	guest.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(guest); string(b) != "hello" || err != nil {
		t.Errorf("the guest read %q, %v through the passed socket; want hello", b, err)
	}

	var inits int
	var allocated int64
	for _, l := range strings.Split(stderr.String(), "\n") {
		var pkg string
		var at, clock float64
		var bytes, allocs int64
		if _, err := fmt.Sscanf(l, "init %s @%f ms, %f ms clock, %d bytes, %d allocs", &pkg, &at, &clock, &bytes, &allocs); err != nil {
			continue
		}
		inits++
		allocated += bytes
		if strings.HasPrefix(pkg, "github.com/cosmicac/cosmicac/") && pkg != "github.com/cosmicac/cosmicac/internal/qemu/handoff" {
			t.Errorf("%s initialized before qemu-relay ran", pkg)
		}
	}
	t.Logf("qemu-relay: %v, after %d packages' init (%d KiB allocated)", took.Round(time.Millisecond), inits, allocated>>10)
	if inits == 0 {
		t.Errorf("no init trace from GODEBUG=inittrace=1: %s", stderr.String())
	}
	if allocated > 4<<20 {
		t.Errorf("the inits before qemu-relay allocated %d MiB; want under 4", allocated>>20)
	}
}
