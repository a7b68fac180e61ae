package datasync_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/cosmicac/cosmicac/internal/datasync"
	"github.com/cosmicac/cosmicac/internal/datasync/presign"
	"github.com/cosmicac/cosmicac/internal/s3test"
)

func TestZZSpecialKeys(t *testing.T) {
	srv := s3test.Start(t)
	c := srv.Client(t)
	srv.MakeBucket(t, "data")
	keys := []string{"sp ace", "plus+x", "semi;x", "eq=x", "colon:x", "at@x", "bang!x", "dollar$x", "amp&x", "q?x", "hash#x", "pct%x", "pct%2Fx", "paren(x)", "star*x", "comma,x", "uni-é", "tilde~x", "quote'x", "back\\x", "dots...x"}
	for _, k := range keys {
		put(t, c, "data", "in/"+k, []byte(k))
	}
	v := volume(srv, "data", "in", true, true)
	for _, k := range keys {
		reqs, err := presign.Sign(v, datasync.OpGet, []string{k}, "", time.Minute, time.Now())
		if err != nil {
			t.Errorf("%q: sign: %v", k, err)
			continue
		}
		resp, err := http.Get(reqs[0].URL)
		if err != nil {
			t.Errorf("%q: %v", k, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != k {
			t.Logf("GET %q: %d %.120s", k, resp.StatusCode, b)
		}
		// PUT to a fresh key
		pr, _ := presign.Sign(v, datasync.OpPut, []string{"new/" + k}, "", time.Minute, time.Now())
		req, _ := http.NewRequest("PUT", pr[0].URL, strings.NewReader("z"))
		resp, err = http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Logf("PUT %q: %d %.120s", k, resp.StatusCode, b)
			}
		}
	}
	dir := t.TempDir()
	st, err := datasync.Pull(context.Background(), signer{v}, dir, datasync.Options{})
	t.Logf("pull: %+v err=%v", st, err)
}

func TestZZCopySourceHeader(t *testing.T) {
	srv := s3test.Start(t)
	c := srv.Client(t)
	srv.MakeBucket(t, "data")
	srv.MakeBucket(t, "secret")
	put(t, c, "secret", "payroll.csv", []byte("TOP SECRET"))
	v := volume(srv, "data", "in", true, false)
	pr, _ := presign.Sign(v, datasync.OpPut, []string{"stolen"}, "", time.Minute, time.Now())
	for _, src := range []string{"secret/payroll.csv", "/secret/payroll.csv"} {
		req, _ := http.NewRequest("PUT", pr[0].URL, nil)
		req.Header.Set("x-amz-copy-source", src)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("copy with %q: %d %.300s", src, resp.StatusCode, b)
	}
	o, err := c.GetObject(context.Background(), "data", "in/stolen", minio.GetObjectOptions{})
	if err == nil {
		b, err := io.ReadAll(o)
		t.Logf("in/stolen now: %q %v", b, err)
	}
	// acl header
	req, _ := http.NewRequest("PUT", pr[0].URL, strings.NewReader("x"))
	req.Header.Set("x-amz-acl", "public-read")
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("acl put: %d %.200s", resp.StatusCode, b)
	}
}

func TestZZPartNameDeletedByRWD(t *testing.T) {
	srv := s3test.Start(t)
	c := srv.Client(t)
	srv.MakeBucket(t, "data")
	put(t, c, "data", "in/model.cosmicac-part", []byte("a legit object"))
	put(t, c, "data", "in/a", []byte("a"))
	v := volume(srv, "data", "in", true, true)
	dir := t.TempDir()
	ctx := context.Background()
	st, err := datasync.Pull(ctx, signer{v}, dir, datasync.Options{})
	t.Logf("pull %+v %v", st, err)
	st, err = datasync.Push(ctx, signer{v}, dir, true, datasync.Options{})
	t.Logf("RWD push with no change: %+v %v; remote now %v", st, err, remoteKeys(t, c, "data"))
}

func TestZZLongName(t *testing.T) {
	srv := s3test.Start(t)
	c := srv.Client(t)
	srv.MakeBucket(t, "data")
	long := strings.Repeat("n", 250)
	put(t, c, "data", "in/"+long, []byte("x"))
	v := volume(srv, "data", "in", false, false)
	st, err := datasync.Pull(context.Background(), signer{v}, t.TempDir(), datasync.Options{})
	t.Logf("pull of a 250-byte name: %+v err=%v", st, err)
}

func TestZZControlChar(t *testing.T) {
	srv := s3test.Start(t)
	c := srv.Client(t)
	srv.MakeBucket(t, "data")
	put(t, c, "data", "in/ok", []byte("x"))
	_, perr := c.PutObject(context.Background(), "data", "in/bad\x01x", bytes.NewReader([]byte("y")), 1, minio.PutObjectOptions{})
	t.Logf("put ctl key: %v", perr)
	v := volume(srv, "data", "in", false, false)
	st, err := datasync.Pull(context.Background(), signer{v}, t.TempDir(), datasync.Options{})
	t.Logf("pull with a control-char key: %+v err=%v", st, err)
}

type swapSigner struct {
	signer
	dir, target string
}

func (s swapSigner) Sign(ctx context.Context, op datasync.Op, keys []string, token string) ([]datasync.SignedRequest, error) {
	if op == datasync.OpPut {
		p := filepath.Join(s.dir, "result.txt")
		os.Remove(p)
		os.Symlink(s.target, p)
	}
	return s.signer.Sign(ctx, op, keys, token)
}

func TestZZPushTOCTOU(t *testing.T) {
	srv := s3test.Start(t)
	c := srv.Client(t)
	srv.MakeBucket(t, "data")
	outside := filepath.Join(t.TempDir(), "host-secret")
	os.WriteFile(outside, []byte("HOST SECRET 1234"), 0o600) // same length as below
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "result.txt"), []byte("job result 12345"), 0o644)
	v := volume(srv, "data", "in", true, false)
	st, err := datasync.Push(context.Background(), swapSigner{signer{v}, dir, outside}, dir, false, datasync.Options{})
	t.Logf("push %+v %v", st, err)
	o, err := c.GetObject(context.Background(), "data", "in/result.txt", minio.GetObjectOptions{})
	if err == nil {
		b, err := io.ReadAll(o)
		t.Logf("in/result.txt in the store: %q %v", b, err)
	}
}

type slowRT struct{}

func (slowRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Query().Get("list-type") == "" {
		time.Sleep(1100 * time.Millisecond)
	}
	return http.DefaultTransport.RoundTrip(r)
}

type shortSigner struct{ v presign.Volume }

func (s shortSigner) Sign(_ context.Context, op datasync.Op, keys []string, token string) ([]datasync.SignedRequest, error) {
	return presign.Sign(s.v, op, keys, token, 2*time.Second, time.Now())
}

func TestZZBatchExpiry(t *testing.T) {
	srv := s3test.Start(t)
	c := srv.Client(t)
	srv.MakeBucket(t, "data")
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		put(t, c, "data", "in/"+k, []byte(k))
	}
	v := volume(srv, "data", "in", false, false)
	st, err := datasync.Pull(context.Background(), shortSigner{v}, t.TempDir(), datasync.Options{Parallel: 1, Client: &http.Client{Transport: slowRT{}}})
	t.Logf("pull, each object 1.1s, TTL 2s, one batch: %+v err=%v", st, err)
}

func TestZZUnreachableLeaksURL(t *testing.T) {
	v := presign.Volume{Endpoint: "http://127.0.0.1:1", Region: "us-east-1", AccessKey: "AKIAFULLACCESSKEY", SecretKey: "s", Container: "data", Prefix: "in"}
	_, err := datasync.Pull(context.Background(), signer{v}, t.TempDir(), datasync.Options{})
	t.Logf("error: %v", err)
}
