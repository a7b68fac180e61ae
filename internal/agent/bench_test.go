package agent

// TestShellBench measures a shell through the fabric next to plain
// `ssh localhost` (Debian's openssh, sshd on a loopback port with a
// temporary host key and authorized key) in the same run:
//
//   - keystroke echo: one byte typed into `cat` on a remote terminal, until
//     the terminal's echo of it is back (p50, p90, p99 of 1000);
//   - bulk: `cat` of a 100 MiB file (random bytes) through the session.
//
// It runs only with COSMICAC_SHELL_BENCH=1 (docs/benchmarks.md, "Shell").

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

const (
	benchKeystrokes = 1000
	benchFileSize   = 100 << 20
)

func TestShellBench(t *testing.T) {
	if os.Getenv("COSMICAC_SHELL_BENCH") == "" {
		t.Skip("set COSMICAC_SHELL_BENCH=1 to run the shell benchmark")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "100MiB")
	writeRandomFile(t, file, benchFileSize)

	r := newRig(t, nil)
	fab := fabricEcho(t, r)
	fabBulk := fabricCat(t, r, file)

	ssh := newSSHD(t, dir)
	sshE := ssh.echo(t)
	sshSetup, sshBulk := ssh.cat(t, file)

	t.Logf("keystroke echo (n=%d): fabric p50 %v p90 %v p99 %v | ssh p50 %v p90 %v p99 %v",
		benchKeystrokes, pct(fab, 50), pct(fab, 90), pct(fab, 99), pct(sshE, 50), pct(sshE, 90), pct(sshE, 99))
	mibs := func(d time.Duration) float64 { return float64(benchFileSize) / (1 << 20) / d.Seconds() }
	t.Logf("cat 100 MiB: fabric %v (%.0f MiB/s, session already connected) | ssh %v total, %v of it connection setup (`ssh true`), %.0f MiB/s without it",
		fabBulk.Round(time.Millisecond), mibs(fabBulk), sshBulk.Round(time.Millisecond), sshSetup.Round(time.Millisecond), mibs(sshBulk-sshSetup))
}

func writeRandomFile(t *testing.T, path string, size int) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rng := rand.NewChaCha8([32]byte{1})
	buf := make([]byte, 1<<20)
	for written := 0; written < size; written += len(buf) {
		rng.Read(buf)
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100].Round(time.Microsecond)
}

// fabricEcho types single bytes into `cat` on a remote terminal and times
// each echo.
func fabricEcho(t *testing.T, r *testRig) []time.Duration {
	ctx := context.Background()
	c, _, err := r.dialer.DialShell(ctx, "", shellproto.OpenParams{TTY: true, Argv: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, rd := shellproto.NewWriter(c), shellproto.NewReader(c)
	key := func() time.Duration {
		start := time.Now()
		if err := w.Frame(shellproto.TypeStdin, []byte("x")); err != nil {
			t.Fatal(err)
		}
		for {
			f, err := rd.Next()
			if err != nil {
				t.Fatal(err)
			}
			if f.Type == shellproto.TypeStdout && len(f.Payload) > 0 {
				return time.Since(start)
			}
		}
	}
	for range 20 { // warm up
		key()
	}
	out := make([]time.Duration, benchKeystrokes)
	for i := range out {
		out[i] = key()
	}
	return out
}

func fabricCat(t *testing.T, r *testRig, file string) time.Duration {
	ctx := context.Background()
	start := time.Now()
	c, _, err := r.dialer.DialShell(ctx, "", shellproto.OpenParams{Argv: []string{"cat", file}})
	if err != nil {
		t.Fatal(err)
	}
	cw := &countWriter{}
	es, err := agentapi.RunSession(ctx, c, agentapi.SessionIO{Stdout: cw})
	d := time.Since(start)
	if err != nil || es.Code != 0 || cw.n != benchFileSize {
		t.Fatalf("cat: %+v %v, %d bytes", es, err, cw.n)
	}
	return d
}

type countWriter struct{ n int }

func (c *countWriter) Write(p []byte) (int, error) { c.n += len(p); return len(p), nil }

// sshd is a throwaway sshd on a loopback port.
type sshd struct {
	port, key string
}

func newSSHD(t *testing.T, dir string) *sshd {
	for _, b := range []string{"/usr/sbin/sshd", "ssh", "ssh-keygen"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("the ssh baseline needs %s (apt-get install openssh-server openssh-client): %v", b, err)
		}
	}
	hostKey, userKey := filepath.Join(dir, "host_ed25519"), filepath.Join(dir, "user_ed25519")
	for _, k := range []string{hostKey, userKey} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", k).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v: %s", err, out)
		}
	}
	pub, _ := os.ReadFile(userKey + ".pub")
	auth := filepath.Join(dir, "authorized_keys")
	os.WriteFile(auth, pub, 0o600)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	cfg := filepath.Join(dir, "sshd_config")
	os.WriteFile(cfg, []byte(fmt.Sprintf("Port %s\nListenAddress 127.0.0.1\nHostKey %s\nAuthorizedKeysFile %s\n"+
		"PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nPermitRootLogin yes\nStrictModes no\n"+
		"PidFile %s\n", port, hostKey, auth, filepath.Join(dir, "sshd.pid"))), 0o600)
	os.MkdirAll("/run/sshd", 0o755)
	cmd := exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", cfg)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sshd: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	go io.Copy(io.Discard, stderr)
	waittest.NoError(t, func() error {
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err == nil {
			c.Close()
		}
		return err
	}, "sshd to listen on %s", port)
	return &sshd{port: port, key: userKey}
}

func (s *sshd) command(args ...string) *exec.Cmd {
	base := []string{"-F", "/dev/null", "-i", s.key, "-p", s.port, "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes"}
	return exec.Command("ssh", append(base, args...)...)
}

func (s *sshd) echo(t *testing.T) []time.Duration {
	cmd := s.command("-tt", "root@127.0.0.1", "cat")
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	out := bufio.NewReader(outp)
	key := func() time.Duration {
		start := time.Now()
		if _, err := in.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := out.ReadByte(); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	key() // waits for the connection
	for range 20 {
		key()
	}
	res := make([]time.Duration, benchKeystrokes)
	for i := range res {
		res[i] = key()
	}
	return res
}

func (s *sshd) cat(t *testing.T, file string) (setup, total time.Duration) {
	start := time.Now()
	if out, err := s.command("root@127.0.0.1", "true").CombinedOutput(); err != nil {
		t.Fatalf("ssh true: %v: %s", err, out)
	}
	setup = time.Since(start)
	cmd := s.command("root@127.0.0.1", "cat", file)
	cw := &countWriter{}
	cmd.Stdout = cw
	start = time.Now()
	if err := cmd.Run(); err != nil || cw.n != benchFileSize {
		t.Fatalf("ssh cat: %v, %d bytes", err, cw.n)
	}
	return setup, time.Since(start)
}
