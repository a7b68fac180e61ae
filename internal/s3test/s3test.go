// Package s3test runs a real S3 server for tests: the Versity S3 Gateway
// (versitygw, Apache-2.0), one process per test, on loopback, serving a
// directory of the test's own (its "posix" backend). Tests and test
// harnesses import it; production code does not (archtest).
//
// Why Versity: it is a real S3 implementation, so requests must carry an
// AWS Signature Version 4 (an anonymous request or a wrong key is refused
// with 403, as by any real store, and presigned URLs are checked as S3
// checks them); it keeps an object as a plain file, Dir/BUCKET/KEY, which
// a test can read to see what landed; and it is ready in a fraction of a
// second and stops on SIGTERM. SeaweedFS, the other Apache-2.0 server that
// builds from Go modules, takes 11 minutes to build here and seconds to
// start; MinIO's server is AGPL and is not used (its Apache-2.0 client,
// minio-go, is: Client).
//
// hack/build-s3.sh builds versitygw from the Go module proxy, and
// hack/test.sh sets BinEnv to it. Without the variable a test that calls
// Start skips, saying so, and under CI fails (testenv.Require).
package s3test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/cosmicac/cosmicac/internal/testenv"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// BinEnv names the versitygw binary that Start runs (hack/build-s3.sh
// builds it; hack/test.sh sets the variable).
const BinEnv = "COSMICAC_S3_SERVER"

// Region is the region the server answers for and signatures name.
const Region = "us-east-1"

// How long Start waits for the server to answer, and how long a stop waits
// after SIGTERM before SIGKILL.
const (
	readyTimeout = 30 * time.Second
	stopGrace    = 10 * time.Second
)

// Server is a running versitygw: the S3 API on loopback, its root
// account's keys, and the directory it keeps buckets and objects in.
type Server struct {
	// Endpoint is its S3 address, http://127.0.0.1:PORT.
	Endpoint string
	// Region is the region to sign for, Region.
	Region string
	// AccessKey and SecretKey are the root account's keys, random for
	// each Start.
	AccessKey, SecretKey string
	// Dir is the posix backend's directory: a bucket is the directory
	// Dir/BUCKET, an object the file Dir/BUCKET/KEY (a key's slashes are
	// directories). versitygw keeps hidden directories of its own there
	// too, which no listing shows: Dir/.vgwlocks (lock files of
	// conditional writes) and Dir/BUCKET/.sgwtmp (uploads in progress).
	Dir string

	cmd *exec.Cmd
	out *waittest.Buffer
}

// Start runs the versitygw named by $COSMICAC_S3_SERVER until the test
// ends, and waits until it answers. Without the variable the test skips
// with a message, and under CI ($CI set) fails. At the test's end the
// server gets SIGTERM, and SIGKILL if it has not exited 10 seconds later;
// if the test failed, its output is logged.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := os.Getenv(BinEnv)
	if bin == "" {
		testenv.Require(t, false, "no real S3 server: set %s to a versitygw binary (hack/build-s3.sh builds one; hack/test.sh sets it)", BinEnv)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s=%s: %v", BinEnv, bin, err)
	}
	tmp := t.TempDir()
	// Object metadata (ETag, Content-Type, checksums, a bucket's ACL) goes
	// to a sidecar directory beside Dir rather than to the default
	// extended attributes, which not every test machine's file system
	// takes (tmpfs before Linux 6.6; versitygw then refuses to start).
	// Both paths are absolute (t.TempDir's): the posix backend changes
	// into its directory before it opens the sidecar, and refuses a
	// sidecar inside it.
	dir, meta := filepath.Join(tmp, "data"), filepath.Join(tmp, "meta")
	for _, d := range []string{dir, meta} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	port := freePort(t)
	s := &Server{
		Endpoint:  fmt.Sprintf("http://127.0.0.1:%d", port),
		Region:    Region,
		AccessKey: randomKey(20),
		SecretKey: randomKey(40),
		Dir:       dir,
		out:       &waittest.Buffer{},
	}
	// Flags before the backend's name are the gateway's, after it the
	// backend's. versitygw reads most flags from environment variables
	// too (ROOT_ACCESS_KEY, VGW_PORT, LOGFILE, VGW_DEBUG, …): it gets an
	// environment of its own, the keys alone, so that nothing the test
	// process inherited reconfigures it, and the secret is not on its
	// command line. /health answers 200 without a signature: it tells
	// readiness apart from the 403 every unsigned S3 request gets.
	s.cmd = exec.Command(bin,
		"--port", fmt.Sprintf("127.0.0.1:%d", port),
		"--region", Region,
		"--health", "/health",
		"posix", "--sidecar", meta, dir)
	s.cmd.Env = []string{"ROOT_ACCESS_KEY=" + s.AccessKey, "ROOT_SECRET_KEY=" + s.SecretKey}
	s.cmd.Dir = tmp
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	t0 := time.Now()
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start versitygw: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(stopGrace):
			t.Errorf("versitygw still running %v after SIGTERM: killed", stopGrace)
			s.cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("versitygw's output:\n%s", s.out)
		}
	})
	waittest.NoErrorWithin(t, readyTimeout, func() error {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("versitygw exited before it was ready: %v\n%s", err, s.out)
		default:
		}
		resp, err := http.Get(s.Endpoint + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /health: %s", resp.Status)
		}
		return nil
	}, "versitygw to answer at %s; its output:\n%s", s.Endpoint, s.out)
	t.Logf("versitygw ready at %s after %v", s.Endpoint, time.Since(t0).Round(time.Millisecond))
	return s
}

// Client returns a minio-go client of the server's root account: path-style
// bucket addresses (the server has no virtual-host domain), signed for
// Region.
func (s *Server) Client(t testing.TB) *minio.Client {
	t.Helper()
	c, err := NewClient(s.Endpoint, s.Region, s.AccessKey, s.SecretKey)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// NewClient returns a minio-go client of the S3 server at endpoint
// (http://HOST:PORT) with the keys given, path-style, signed for region:
// what Client returns, with other keys (a wrong secret, in a test that the
// server refuses it).
func NewClient(endpoint, region, accessKey, secretKey string) (*minio.Client, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("parse endpoint %s: %w", endpoint, err)
	}
	c, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(accessKey, secretKey, ""),
		Secure:       u.Scheme == "https",
		Region:       region,
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return nil, fmt.Errorf("new s3 client for %s: %w", endpoint, err)
	}
	return c, nil
}

// MakeBucket creates the bucket name, or fails the test.
func (s *Server) MakeBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Client(t).MakeBucket(ctx, name, minio.MakeBucketOptions{Region: s.Region}); err != nil {
		t.Fatalf("make bucket %s: %v", name, err)
	}
}

// randomKey returns n random characters of [A-Z0-9], as AWS keys are.
func randomKey(n int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
