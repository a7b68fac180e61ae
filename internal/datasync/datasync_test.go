package datasync_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/cosmicac/cosmicac/internal/datasync"
	"github.com/cosmicac/cosmicac/internal/datasync/presign"
	"github.com/cosmicac/cosmicac/internal/s3test"
)

// signer signs for one volume as the platform does (presign.Sign).
type signer struct{ v presign.Volume }

func (s signer) Sign(_ context.Context, op datasync.Op, keys []string, token string) ([]datasync.SignedRequest, error) {
	return presign.Sign(s.v, op, keys, token, 5*time.Minute, time.Now())
}

func volume(s *s3test.Server, bucket, prefix string, put, del bool) presign.Volume {
	return presign.Volume{Endpoint: s.Endpoint, Region: s.Region, AccessKey: s.AccessKey, SecretKey: s.SecretKey,
		Container: bucket, Prefix: prefix, Put: put, Delete: del}
}

func put(t *testing.T, c *minio.Client, bucket, key string, data []byte) {
	t.Helper()
	if _, err := c.PutObject(context.Background(), bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func remoteKeys(t *testing.T, c *minio.Client, bucket string) []string {
	t.Helper()
	var out []string
	for o := range c.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		out = append(out, o.Key)
	}
	slices.Sort(out)
	return out
}

// TestPullPushOnARealS3Server: a volume's objects under its prefix, and
// nothing else, are pulled into a directory with presigned requests
// (more than one listing page and one signing batch); what the job
// changed and added is pushed back, what it did not change is not; RWD
// deletes what the job deleted, RW does not; a read-only volume is signed
// no put; symbolic links are not followed.
func TestPullPushOnARealS3Server(t *testing.T) {
	srv := s3test.Start(t)
	c := srv.Client(t)
	srv.MakeBucket(t, "data")
	big := make([]byte, 3<<20+17)
	rand.Read(big)
	put(t, c, "data", "in/a.txt", []byte("alpha"))
	put(t, c, "data", "in/dir/deep/big.bin", big)
	put(t, c, "data", "other/x", []byte("not the volume's"))
	put(t, c, "data", "inside", []byte("a sibling of the prefix, not under it"))
	want := int64(len("alpha") + len(big))
	for i := range 1100 { // past a listing page (1000) and a signing batch (256)
		b := []byte(fmt.Sprint(i))
		put(t, c, "data", fmt.Sprintf("in/many/%04d", i), b)
		want += int64(len(b))
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "mnt")
	var progress int
	var first datasync.Stats
	st, err := datasync.Pull(ctx, signer{volume(srv, "data", "in", false, false)}, dir, datasync.Options{Progress: func(p datasync.Stats) {
		if progress == 0 {
			first = p
		}
		progress++
	}})
	if err != nil {
		t.Fatal(err)
	}
	// Progress is told once the listing is read (what is to come), then
	// after each object.
	if first.ListedObjects != 1102 || first.ListedBytes != want || first.Objects != 0 {
		t.Fatalf("the first progress %+v, want the listing's 1102 objects, %d bytes, none moved", first, want)
	}
	if st.Objects != 1102 || st.Bytes != want || progress != 1103 || len(st.Skipped) != 0 {
		t.Fatalf("pulled %+v (%d progress calls), want 1102 objects, %d bytes", st, progress, want)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "dir/deep/big.bin")); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("big.bin: %d bytes, %v", len(got), err)
	}
	for _, absent := range []string{"x", "other", "inside", "side"} {
		if _, err := os.Stat(filepath.Join(dir, absent)); err == nil {
			t.Errorf("%s, outside the prefix, was pulled", absent)
		}
	}

	// The job changes a file, adds one, deletes one, links another.
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("alpha, changed"), 0o644)
	os.WriteFile(filepath.Join(dir, "dir/new.txt"), []byte("new"), 0o644)
	os.Remove(filepath.Join(dir, "many/0007"))
	os.Symlink("/etc/hostname", filepath.Join(dir, "link"))

	if _, err := datasync.Push(ctx, signer{volume(srv, "data", "in", false, false)}, dir, false, datasync.Options{}); err == nil {
		t.Fatal("a read-only volume was pushed")
	}
	st, err = datasync.Push(ctx, signer{volume(srv, "data", "in", true, false)}, dir, false, datasync.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Objects != 2 || st.Unchanged != 1100 || st.Deleted != 0 || !slices.Equal(st.Skipped, []string{"link"}) {
		t.Errorf("RW push: %+v, want 2 put (a.txt, dir/new.txt), 1100 unchanged, link skipped", st)
	}
	got, err := c.GetObject(ctx, "data", "in/a.txt", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(got); string(b) != "alpha, changed" {
		t.Errorf("in/a.txt after the push: %q", b)
	}
	keys := remoteKeys(t, c, "data")
	if !slices.Contains(keys, "in/many/0007") || !slices.Contains(keys, "in/dir/new.txt") || slices.Contains(keys, "in/link") {
		t.Errorf("after an RW push the store holds %d keys; 0007 kept: %v, new.txt: %v, link: %v", len(keys),
			slices.Contains(keys, "in/many/0007"), slices.Contains(keys, "in/dir/new.txt"), slices.Contains(keys, "in/link"))
	}
	st, err = datasync.Push(ctx, signer{volume(srv, "data", "in", true, true)}, dir, true, datasync.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Objects != 0 || st.Deleted != 1 {
		t.Errorf("RWD push: %+v, want nothing put and in/many/0007 deleted", st)
	}
	keys = remoteKeys(t, c, "data")
	if slices.Contains(keys, "in/many/0007") || !slices.Contains(keys, "other/x") || !slices.Contains(keys, "inside") {
		t.Errorf("after an RWD push: 0007 gone %v, other/x kept %v, inside kept %v", !slices.Contains(keys, "in/many/0007"),
			slices.Contains(keys, "other/x"), slices.Contains(keys, "inside"))
	}
}

// TestSyncRefusals: a wrong secret key is ErrRefused, a missing container
// ErrNoContainer, a store that does not answer ErrUnreachable; a signed
// request moved to another object is refused by the store.
func TestSyncRefusals(t *testing.T) {
	srv := s3test.Start(t)
	srv.MakeBucket(t, "data")
	put(t, srv.Client(t), "data", "in/a", []byte("a"))
	ctx := context.Background()
	wrong := volume(srv, "data", "in", false, false)
	wrong.SecretKey += "x"
	if _, err := datasync.Pull(ctx, signer{wrong}, t.TempDir(), datasync.Options{}); !errors.Is(err, datasync.ErrRefused) {
		t.Errorf("a wrong secret: %v, want ErrRefused", err)
	}
	if _, err := datasync.Pull(ctx, signer{volume(srv, "nope", "", false, false)}, t.TempDir(), datasync.Options{}); !errors.Is(err, datasync.ErrNoContainer) {
		t.Errorf("a missing container: %v, want ErrNoContainer", err)
	}
	gone := volume(srv, "data", "", false, false)
	gone.Endpoint = "http://127.0.0.1:1"
	if _, err := datasync.Pull(ctx, signer{gone}, t.TempDir(), datasync.Options{}); !errors.Is(err, datasync.ErrUnreachable) {
		t.Errorf("no server: %v, want ErrUnreachable", err)
	}
	reqs, err := presign.Sign(volume(srv, "data", "in", false, false), datasync.OpGet, []string{"a"}, "", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	moved := strings.Replace(reqs[0].URL, "/data/in/a?", "/data/other/x?", 1)
	resp, err := http.Get(moved)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a signed GET moved to another key: %d, want 403", resp.StatusCode)
	}
}

// TestPullNeverEscapesTheDirectory: a listing that names objects "../x",
// "a/../../x" or "/etc/x" (a store's keys are anyone's) writes nothing
// outside the directory; those keys are skipped, named.
func TestPullNeverEscapesTheDirectory(t *testing.T) {
	keys := []string{"ok.txt", "../escape", "a/../../escape2", "/etc/escape3", "a//b", "./c"}
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("list-type") == "2" {
			fmt.Fprint(w, `<ListBucketResult><Prefix>p/</Prefix>`)
			for _, k := range keys {
				fmt.Fprintf(w, `<Contents><Key>p/%s</Key><Size>2</Size><ETag>"x"</ETag></Contents>`, k)
			}
			fmt.Fprint(w, `<IsTruncated>false</IsTruncated></ListBucketResult>`)
			return
		}
		io.WriteString(w, "hi")
	}))
	defer store.Close()
	v := presign.Volume{Endpoint: store.URL, Region: "us-east-1", AccessKey: "a", SecretKey: "s", Container: "b", Prefix: "p"}
	parent := t.TempDir()
	dir := filepath.Join(parent, "mnt")
	st, err := datasync.Pull(context.Background(), signer{v}, dir, datasync.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Objects != 1 || len(st.Skipped) != 5 {
		t.Errorf("pulled %+v, want ok.txt only and 5 keys skipped", st)
	}
	entries, _ := os.ReadDir(parent)
	if len(entries) != 1 {
		t.Errorf("the directory's parent holds %d entries, want only mnt", len(entries))
	}
	for _, k := range []string{"", "/", "../x", "a/./b", "a\x00b"} {
		if datasync.CheckKey(k) == nil {
			t.Errorf("CheckKey(%q) passed", k)
		}
	}
	if _, err := presign.Sign(v, datasync.OpGet, []string{"../x"}, "", time.Minute, time.Now()); err == nil {
		t.Error("a key outside the volume was signed")
	}
	if _, err := presign.Sign(v, datasync.OpDelete, []string{"x"}, "", time.Minute, time.Now()); err == nil {
		t.Error("a delete was signed for a volume that is not RWD")
	}
}

// hookSigner is signer with a hook on each Sign and a TTL of its own.
type hookSigner struct {
	signer
	ttl   time.Duration
	calls *atomic.Int64
	hook  func(op datasync.Op, keys []string)
}

func (h hookSigner) Sign(_ context.Context, op datasync.Op, keys []string, token string) ([]datasync.SignedRequest, error) {
	if h.calls != nil {
		h.calls.Add(1)
	}
	if h.hook != nil {
		h.hook(op, keys)
	}
	ttl := h.ttl
	if ttl == 0 {
		ttl = 5 * time.Minute
	}
	return presign.Sign(h.v, op, keys, token, ttl, time.Now())
}

// TestSyncHazards: objects named like the files a pull writes on its way
// ("x.cosmicac-part") come in whole and are not deleted by an RWD push of
// an unchanged volume; a volume directory that is a link is walked
// through; a file the job turns into a link to elsewhere while the push
// runs is not followed; requests signed too close to their end are signed
// again; an unreachable store's error carries no signature nor access
// key.
func TestSyncHazards(t *testing.T) {
	srv := s3test.Start(t)
	c := srv.Client(t)
	srv.MakeBucket(t, "data")
	big := make([]byte, 1<<20)
	rand.Read(big)
	put(t, c, "data", "in/x", big)
	put(t, c, "data", "in/x.cosmicac-part", []byte("INJECTED"))
	put(t, c, "data", "in/.cosmicac-part-0123456789abcdef", []byte("also a name"))
	put(t, c, "data", "in/result.txt", []byte("result"))
	ctx := context.Background()
	parent := t.TempDir()
	real := filepath.Join(parent, "real")
	for range 5 { // the collision was a race: several tries
		os.RemoveAll(real)
		if _, err := datasync.Pull(ctx, signer{volume(srv, "data", "in", true, true)}, real, datasync.Options{}); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(filepath.Join(real, "x")); !bytes.Equal(got, big) {
			t.Fatalf("x after the pull: %d bytes, want its own %d", len(got), len(big))
		}
		if got, _ := os.ReadFile(filepath.Join(real, "x.cosmicac-part")); string(got) != "INJECTED" {
			t.Fatalf("x.cosmicac-part after the pull: %q", got)
		}
	}
	// The volume directory is a link to the real one (as a mount point
	// may be): an RWD push of the unchanged volume deletes nothing.
	mnt := filepath.Join(parent, "mnt")
	if err := os.Symlink(real, mnt); err != nil {
		t.Fatal(err)
	}
	st, err := datasync.Push(ctx, signer{volume(srv, "data", "in", true, true)}, mnt, true, datasync.Options{})
	if err != nil || st.Deleted != 0 || st.Objects != 0 || st.Unchanged != 4 {
		t.Fatalf("an RWD push of the unchanged volume through a link: %+v, %v", st, err)
	}
	// The job swaps result.txt for a link to a host file once the walk is
	// done (when the put is signed): its upload is refused, not followed.
	os.WriteFile(filepath.Join(real, "result.txt"), []byte("changed"), 0o644)
	secret := filepath.Join(parent, "host-secret")
	os.WriteFile(secret, []byte("HOST SECRET"), 0o600)
	swap := hookSigner{signer: signer{volume(srv, "data", "in", true, false)}, hook: func(op datasync.Op, keys []string) {
		if op == datasync.OpPut {
			os.Remove(filepath.Join(real, "result.txt"))
			os.Symlink(secret, filepath.Join(real, "result.txt"))
		}
	}}
	if _, err := datasync.Push(ctx, swap, real, false, datasync.Options{}); err == nil {
		t.Error("a push whose file became a link succeeded")
	}
	obj, _ := c.GetObject(ctx, "data", "in/result.txt", minio.GetObjectOptions{})
	if b, _ := io.ReadAll(obj); string(b) == "HOST SECRET" {
		t.Fatal("the push followed a link to a host file")
	}
	// Signed for less than the margin: each request is signed again.
	var calls atomic.Int64
	short := hookSigner{signer: signer{volume(srv, "data", "in", false, false)}, ttl: 4 * time.Minute, calls: &calls}
	if _, err := datasync.Pull(ctx, short, t.TempDir(), datasync.Options{}); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n < 1+1+4 { // the listing, the batch, then each of the 4 again
		t.Errorf("%d signing calls for requests near their end, want each signed again", n)
	}
	// An unreachable store: the error names the object, never the
	// signature nor the access key.
	gone := volume(srv, "data", "in", false, false)
	gone.Endpoint, gone.AccessKey = "http://127.0.0.1:1", "AKIAFULLACCESSKEY"
	_, err = datasync.Pull(ctx, signer{gone}, t.TempDir(), datasync.Options{})
	if !errors.Is(err, datasync.ErrUnreachable) || strings.Contains(err.Error(), "Signature") || strings.Contains(err.Error(), "AKIAFULL") {
		t.Errorf("an unreachable store's error: %v", err)
	}
}
