package datasync_test

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/datasync"
	"github.com/cosmicac/cosmicac/internal/datasync/presign"
	"github.com/cosmicac/cosmicac/internal/s3test"
)

// countingSigner signs as the platform does (for 15 minutes: no request
// is signed again) and counts the objects it signs a GET for.
type countingSigner struct {
	v    presign.Volume
	gets *atomic.Int64
}

func (c countingSigner) Sign(_ context.Context, op datasync.Op, keys []string, token string) ([]datasync.SignedRequest, error) {
	if op == datasync.OpGet {
		c.gets.Add(int64(len(keys)))
	}
	return presign.Sign(c.v, op, keys, token, 15*time.Minute, time.Now())
}

// TestFetchIntoTheNodeCache: the first fetch of a prefix copies its
// objects into a directory of the cache named by their content; the
// second, from another bucket holding the same objects, copies nothing
// and answers the same directory; a changed object is new content,
// copied anew beside the old; another team's fetch of the same listing
// gets a copy of its own.
func TestFetchIntoTheNodeCache(t *testing.T) {
	srv := s3test.Start(t)
	c := srv.Client(t)
	for _, b := range []string{"models", "mirror"} {
		srv.MakeBucket(t, b)
		put(t, c, b, "qwen/model.gguf", []byte("GGUF weights"))
		put(t, c, b, "qwen/tokenizer/vocab.txt", []byte("a b c"))
	}
	cache := t.TempDir()
	var gets atomic.Int64
	fetch := func(bucket, scope string) datasync.Fetched {
		t.Helper()
		f, err := datasync.Fetch(context.Background(), countingSigner{volume(srv, bucket, "qwen", false, false), &gets}, cache, scope, datasync.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	cold := fetch("models", "team-a")
	if cold.Warm || cold.Objects != 2 || gets.Load() != 2 {
		t.Fatalf("the first fetch: %+v, %d objects signed; want 2 copied", cold, gets.Load())
	}
	if fi, err := os.Stat(cold.Dir); err != nil || time.Since(fi.ModTime()) > time.Minute {
		t.Errorf("the entry copied was not marked used: %v, %v", fi.ModTime(), err)
	}
	if b, err := os.ReadFile(filepath.Join(cold.Dir, "tokenizer", "vocab.txt")); err != nil || string(b) != "a b c" {
		t.Fatalf("the cache's copy: %q, %v", b, err)
	}
	long := time.Now().Add(-time.Hour)
	if err := os.Chtimes(cold.Dir, long, long); err != nil {
		t.Fatal(err)
	}
	warm := fetch("mirror", "team-a")
	if !warm.Warm || warm.Dir != cold.Dir || gets.Load() != 2 {
		t.Fatalf("the same content again: %+v, %d objects signed; want the cache's directory, nothing copied", warm, gets.Load())
	}
	if fi, err := os.Stat(warm.Dir); err != nil || time.Since(fi.ModTime()) > time.Minute {
		t.Errorf("the entry found warm was not marked used: %v, %v", fi.ModTime(), err)
	}
	put(t, c, "models", "qwen/model.gguf", []byte("GGUF weights, retrained"))
	changed := fetch("models", "team-a")
	if changed.Warm || changed.Dir == cold.Dir {
		t.Fatalf("changed content: %+v; want a new copy beside %s", changed, cold.Dir)
	}
	// Another team's listing of the same content is not trusted with
	// this team's copy: its own store could serve other bytes.
	if other := fetch("mirror", "team-b"); other.Warm || other.Dir == warm.Dir {
		t.Fatalf("another team's fetch of the same listing: %+v; want a copy of its own", other)
	}
	entries, _ := os.ReadDir(cache)
	if len(entries) != 3 {
		t.Errorf("the cache holds %d entries, want the three copies and no part directory", len(entries))
	}
	if _, err := datasync.Fetch(context.Background(), signer{volume(srv, "models", "nothing-here", false, false)}, cache, "team-a", datasync.Options{}); err == nil {
		t.Error("an empty prefix was fetched")
	}
}
