package simsshd_test

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"

	"github.com/cosmicac/cosmicac/internal/simsshd"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

func newKey(t *testing.T) (ssh.Signer, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s, string(ssh.MarshalAuthorizedKey(s.PublicKey()))
}

// records collects the server's record lines.
type records struct {
	mu    sync.Mutex
	lines []string
}

func (r *records) add(l string) { r.mu.Lock(); r.lines = append(r.lines, l); r.mu.Unlock() }

// waitFor waits until a line holds every part.
func (r *records) waitFor(t *testing.T, parts ...string) {
	t.Helper()
	var lines []string
	if !waittest.Poll(10*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		lines = append(lines[:0], r.lines...)
		return slices.ContainsFunc(lines, func(l string) bool {
			return !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(l, p) })
		})
	}) {
		t.Fatalf("no record with %q in %q", parts, lines)
	}
}

func start(t *testing.T, keys ...string) (*simsshd.Server, *records) {
	t.Helper()
	return startIn(t, t.TempDir(), keys...)
}

func startIn(t *testing.T, dir string, keys ...string) (*simsshd.Server, *records) {
	t.Helper()
	rec := &records{}
	srv, err := simsshd.Start(simsshd.Config{AuthorizedKeys: keys, Shell: "/bin/sh", Env: []string{"FROM_SPEC=spec value"},
		Dir: dir, Record: rec.add}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, rec
}

func dial(srv *simsshd.Server, auth ...ssh.AuthMethod) (*ssh.Client, error) {
	return ssh.Dial("tcp", "127.0.0.1:"+strconv.Itoa(srv.Port()), &ssh.ClientConfig{User: "anyone", Auth: auth,
		HostKeyCallback: ssh.FixedHostKey(srv.HostKey()), Timeout: 10 * time.Second})
}

func TestSSHAdmitsOnlyTheSpecsKeys(t *testing.T) {
	in, inLine := newKey(t)
	out, _ := newKey(t)
	srv, _ := start(t, "garbage that is no key", inLine)
	tests := map[string]struct {
		auth []ssh.AuthMethod
		ok   bool
	}{
		"a key of the spec":        {auth: []ssh.AuthMethod{ssh.PublicKeys(in)}, ok: true},
		"a key not in the spec":    {auth: []ssh.AuthMethod{ssh.PublicKeys(out)}},
		"a password":               {auth: []ssh.AuthMethod{ssh.Password("hunter2")}},
		"keyboard-interactive":     {auth: []ssh.AuthMethod{ssh.KeyboardInteractive(func(string, string, []string, []bool) ([]string, error) { return nil, nil })}},
		"no authentication at all": {},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := dial(srv, tc.auth...)
			if tc.ok {
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				c.Close()
				return
			}
			if err == nil {
				c.Close()
				t.Fatal("dial succeeded, want it refused")
			}
			if !strings.Contains(err.Error(), "unable to authenticate") {
				t.Fatalf("dial: %v, want unable to authenticate", err)
			}
		})
	}
}

func TestSSHNoKeysAdmitsNobody(t *testing.T) {
	k, _ := newKey(t)
	srv, _ := start(t)
	if c, err := dial(srv, ssh.PublicKeys(k)); err == nil {
		c.Close()
		t.Fatal("dial succeeded with no keys in the spec")
	}
}

func TestSSHExecAndShell(t *testing.T) {
	k, line := newKey(t)
	srv, rec := start(t, line)
	c, err := dial(srv, ssh.PublicKeys(k))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	t.Run("exec", func(t *testing.T) {
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Setenv("FROM_CLIENT", "client value"); err != nil {
			t.Fatalf("env request refused: %v", err)
		}
		var stderr strings.Builder
		s.Stderr = &stderr
		got, err := s.Output(`echo "$FROM_SPEC/$FROM_CLIENT"; echo oops >&2; exit 3`)
		var ee *ssh.ExitError
		if !errors.As(err, &ee) || ee.ExitStatus() != 3 {
			t.Fatalf("exec: %v, want exit status 3", err)
		}
		if string(got) != "spec value/client value\n" || stderr.String() != "oops\n" {
			t.Fatalf("stdout %q, stderr %q", got, stderr.String())
		}
	})
	rec.waitFor(t, "opened by anyone (key SHA256:", "(pipes)")
	rec.waitFor(t, "closed after", "exit code 3")

	t.Run("shell", func(t *testing.T) {
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		s.Stdin = strings.NewReader("echo in the shell\nexit 0\n")
		var out strings.Builder
		s.Stdout = &out
		if err := s.Shell(); err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(); err != nil {
			t.Fatalf("shell: %v", err)
		}
		if out.String() != "in the shell\n" {
			t.Fatalf("stdout %q", out.String())
		}
	})

	t.Run("one process a session", func(t *testing.T) {
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		s.Stdin = strings.NewReader("")
		if err := s.Start("sleep 0.2"); err != nil {
			t.Fatal(err)
		}
		if ok, _ := s.SendRequest("exec", true, ssh.Marshal(struct{ Command string }{"true"})); ok {
			t.Fatal("a second exec on a session was accepted")
		}
		if err := s.Wait(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSSHPTYAndWindowChange(t *testing.T) {
	k, line := newKey(t)
	srv, rec := start(t, line)
	c, err := dial(srv, ssh.PublicKeys(k))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.RequestPty("vt100", 40, 100, ssh.TerminalModes{}); err != nil {
		t.Fatalf("pty-req: %v", err)
	}
	stdin, err := s.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := s.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(`test -t 0 && echo "tty $TERM"; stty size; read x; stty size; exit 4`); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- strings.TrimRight(sc.Text(), "\r")
		}
		close(lines)
	}()
	expect := func(want string) {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("output ended before %q", want)
				}
				if l == want {
					return
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no line %q", want)
			}
		}
	}
	expect("tty vt100")
	expect("40 100")
	if err := s.WindowChange(50, 120); err != nil {
		t.Fatal(err)
	}
	// The server handles a channel's requests in order, apart from its
	// data: a request that wants a reply (refused, as unknown) comes back
	// once the window-change before it is applied, and only then is the
	// next line sent.
	if ok, err := s.SendRequest("ping@cosmicac.test", true, nil); ok || err != nil {
		t.Fatalf("ping: %v %v, want refused", ok, err)
	}
	io.WriteString(stdin, "\n")
	expect("50 120")
	var ee *ssh.ExitError
	if err := s.Wait(); !errors.As(err, &ee) || ee.ExitStatus() != 4 {
		t.Fatalf("wait: %v, want exit status 4", err)
	}
	rec.waitFor(t, "(tty)")
}

func TestSSHRefusesForwardingAndSubsystems(t *testing.T) {
	k, line := newKey(t)
	srv, _ := start(t, line)
	c, err := dial(srv, ssh.PublicKeys(k))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if conn, err := c.Dial("tcp", l.Addr().String()); err == nil {
		conn.Close()
		t.Fatal("direct-tcpip was accepted")
	}
	if rl, err := c.Listen("tcp", "127.0.0.1:0"); err == nil {
		rl.Close()
		t.Fatal("tcpip-forward was accepted")
	}
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.RequestSubsystem("netconf"); err == nil {
		t.Fatal("the netconf subsystem was accepted")
	}
}

func TestSSHSFTP(t *testing.T) {
	k, line := newKey(t)
	dir := t.TempDir()
	srv, rec := startIn(t, dir, line)
	c, err := dial(srv, ssh.PublicKeys(k))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fc, err := sftp.NewClient(c)
	if err != nil {
		t.Fatalf("sftp: %v", err)
	}
	// A relative path is in the replica's home.
	f, err := fc.Create("copied.txt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("over sftp\n")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fc.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "copied.txt")); err != nil || string(b) != "over sftp\n" {
		t.Fatalf("the file in the home: %q %v", b, err)
	}
	rec.waitFor(t, "opened by", ": sftp")
	rec.waitFor(t, "closed after", "exit code 0")
}

func TestSSHCloseHangsUpSessions(t *testing.T) {
	k, line := newKey(t)
	srv, rec := start(t, line)
	c, err := dial(srv, ssh.PublicKeys(k))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("sleep 60"); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, "opened by")
	done := make(chan error, 1)
	go func() { done <- srv.Close() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return with a session running")
	}
	rec.waitFor(t, "closed after", "signal HUP")
}

// TestMain checks that the servers closed by the tests left no goroutine
// behind: Close waits for every session's.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every client is told, before it authenticates, that it reached the
// simulated rack's SSH server on the platform's host, not a VM.
func TestSSHBannerSaysWhatItReaches(t *testing.T) {
	k, line := newKey(t)
	srv, _ := start(t, line)
	var got string
	c, err := ssh.Dial("tcp", "127.0.0.1:"+strconv.Itoa(srv.Port()), &ssh.ClientConfig{User: "anyone", Auth: []ssh.AuthMethod{ssh.PublicKeys(k)},
		HostKeyCallback: ssh.FixedHostKey(srv.HostKey()), Timeout: 10 * time.Second,
		BannerCallback: func(m string) error { got = m; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	for _, want := range []string{"simulated rack", "no VM runs", "not a VM's sshd", "platform's host"} {
		if !strings.Contains(got, want) {
			t.Errorf("banner %q lacks %q", got, want)
		}
	}
}
