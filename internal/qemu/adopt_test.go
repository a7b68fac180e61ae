package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/qemu/handoff"
	"github.com/cosmicac/cosmicac/internal/testenv"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// starterEnv makes this test binary the process that starts a detached VM
// and exits (TestMain): its value is the VM's starterConfig.
const starterEnv = "COSMICAC_QEMU_TEST_STARTER"

// starterConfig is what a starter process needs of a VM's Config.
type starterConfig struct {
	Dir, Disk, Format string
	Relay             []string
	Forwards          []Forward
}

func (s starterConfig) config() Config {
	return Config{Dir: s.Dir, Image: Image{Name: "blank", Disk: s.Disk, Format: s.Format}, MemoryMiB: 64, TCGCacheMiB: 16,
		Relay: s.Relay, Forwards: s.Forwards, Detach: true}
}

func TestMain(m *testing.M) {
	if v := os.Getenv(starterEnv); v != "" {
		var s starterConfig
		if err := json.Unmarshal([]byte(v), &s); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		vm, err := Start(s.config())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(vm.Pid())
		os.Exit(0) // and leave it running
	}
	os.Exit(m.Run())
}

// TestAdoptOutlivesItsStarter: a VM started with Detach by a process that
// then exits keeps running; another process adopts it: it takes the
// guest's connections to the forward (now to another host address), stops
// it, and sees it end; a VM that has ended, or a pid file naming a
// process that is not the VM's QEMU, is not adopted. The VM is a real
// QEMU with a blank disk (its firmware finds nothing to boot and waits).
func TestAdoptOutlivesItsStarter(t *testing.T) {
	testenv.RequireCommands(t, "hack/install-deps.sh installs it", "qemu-system-x86_64", "qemu-img", "genisoimage")
	echo := func(name string) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					line, _ := bufio.NewReader(c).ReadString('\n')
					fmt.Fprintf(c, "%s: %s", name, line)
				}()
			}
		}()
		return ln.Addr().String()
	}
	first, second := echo("first"), echo("second")

	dir, err := os.MkdirTemp("", "qa-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	base := filepath.Join(dir, "base.raw")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "raw", base, "16M").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	const guest = "10.0.2.100:7001"
	sc := starterConfig{Dir: filepath.Join(dir, "vm"), Disk: base, Format: "raw", Relay: []string{os.Args[0], handoff.Command},
		Forwards: []Forward{{GuestAddr: guest, HostAddr: first}}}
	c := sc.config()
	if _, err := Prepare(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(sc)
	starter := exec.Command(os.Args[0], "-test.run=^$")
	starter.Env = append(os.Environ(), starterEnv+"="+string(b), "GORACE=atexit_sleep_ms=0")
	out, err := starter.Output()
	if err != nil {
		t.Fatalf("the starter: %v: %s", err, out)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("the starter said %q", out)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the VM's QEMU (pid %d) did not outlive the process that started it: %v", pid, err)
	}

	// Not the VM's: a pid file naming this test's own process.
	other := filepath.Join(dir, "other")
	os.MkdirAll(other, 0o700)
	os.WriteFile(filepath.Join(other, PIDFile), []byte(strconv.Itoa(os.Getpid())), 0o600)
	if _, err := Adopt(Config{Dir: other}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Adopt of a pid file naming another process = %v, want ErrNotRunning", err)
	}

	// QEMU writes its pid file once it has set up.
	waittest.NoErrorWithin(t, time.Minute, func() error {
		if _, ok := runningPID(c.Dir); !ok {
			return fmt.Errorf("no pid file of a running QEMU in %s; its standard error: %q", c.Dir, errTail(c.Dir))
		}
		return nil
	}, "QEMU to write its pid file")
	c.Forwards = []Forward{{GuestAddr: guest, HostAddr: second}}
	vm, err := Adopt(c)
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if vm.Pid() != pid {
		t.Errorf("adopted pid %d, the starter started %d", vm.Pid(), pid)
	}
	// A guest connection, as libslirp makes it for the guestfwd rule the
	// VM was started with, reaches the forward's host address of now.
	g, p := slirpExec(t, guestfwdCommand(t, c, guest))
	defer p.kill()
	g.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintln(g, "ping")
	got, err := io.ReadAll(g)
	if err != nil || string(got) != "second: ping\n" {
		t.Errorf("the guest's connection after adoption: %q, %v; want the second host's answer", got, err)
	}
	g.Close()
	if st := vm.Relays(); st.Relayed != 1 {
		t.Errorf("relays %+v, want 1 relayed", st)
	}
	select {
	case <-vm.Done():
		t.Fatalf("the adopted VM ended: %v", vm.Err())
	default:
	}

	vm.Stop(0)
	if err := vm.Err(); !errors.Is(err, ErrExitNotSeen) {
		t.Errorf("Err of the adopted VM stopped = %v, want ErrExitNotSeen", err)
	}
	if _, ok := runningPID(c.Dir); ok { // a zombie is gone (its reaper is not this test)
		t.Errorf("after Stop the VM's QEMU (pid %d) still runs", pid)
	}
	if _, err := os.Stat(filepath.Join(c.Dir, PIDFile)); !os.IsNotExist(err) {
		t.Errorf("the pid file is left: %v", err)
	}
	if _, err := Adopt(c); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Adopt of an ended VM = %v, want ErrNotRunning", err)
	}
}
