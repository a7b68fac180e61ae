package qemu_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/qemu"
)

// fakeMonitor is a QMP socket that answers as QEMU does and counts the
// power-button presses; the guest "powers off" (done closes) at the
// press numbered offAt (0: never).
type fakeMonitor struct {
	sock  string
	done  chan struct{}
	mu    sync.Mutex
	press int
}

func newFakeMonitor(t *testing.T, offAt int) *fakeMonitor {
	t.Helper()
	dir, err := os.MkdirTemp("", "qmp") // a socket's path has a length limit TempDir's may pass
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	m := &fakeMonitor{sock: filepath.Join(dir, "qmp.sock"), done: make(chan struct{})}
	l, err := net.Listen("unix", m.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintln(c, `{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}}, "capabilities": []}}`)
				r := bufio.NewScanner(c)
				for r.Scan() {
					if strings.Contains(r.Text(), "system_powerdown") {
						m.mu.Lock()
						m.press++
						if m.press == offAt {
							close(m.done)
						}
						m.mu.Unlock()
					}
					fmt.Fprintln(c, `{"return": {}}`)
				}
			}()
		}
	}()
	return m
}

func (m *fakeMonitor) presses() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.press
}

// TestPowerOffPressesAgain: a guest that misses the first press of its
// power button (one that comes while it still boots) gets another, and
// powers off; one that never does is left to the caller at grace.
func TestPowerOffPressesAgain(t *testing.T) {
	m := newFakeMonitor(t, 3)
	if !qemu.PowerOff(m.sock, m.done, time.Minute, 10*time.Millisecond) {
		t.Fatal("PowerOff gave up on a guest that powered off at the third press")
	}
	if got := m.presses(); got != 3 {
		t.Errorf("presses = %d, want 3 (the guest powered off at the third)", got)
	}

	deaf := newFakeMonitor(t, 0)
	if qemu.PowerOff(deaf.sock, deaf.done, 200*time.Millisecond, 20*time.Millisecond) {
		t.Fatal("PowerOff says a guest that never powered off did")
	}
	if got := deaf.presses(); got < 2 {
		t.Errorf("presses = %d in grace of ten repeats, want more than one", got)
	}

	if qemu.PowerOff(filepath.Join(t.TempDir(), "none.sock"), make(chan struct{}), time.Minute, time.Second) {
		t.Fatal("PowerOff says a VM without a monitor powered off")
	}
}
