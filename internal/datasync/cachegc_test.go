package datasync

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// TestCacheGC: a copy that would fill the cache's file system past
// CacheHighPercent removes the entries used least recently until it
// would be CacheLowPercent full, never the entry being fetched nor one
// used in the last CacheMinAge; below the mark nothing goes, and nothing
// goes for a copy that would not fit even then.
func TestCacheGC(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	for name, age := range map[string]time.Duration{"a": 3 * time.Hour, "b": 2 * time.Hour, "c": time.Hour, "recent": 5 * time.Minute, "keep": 4 * time.Hour} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Join(p, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "sub", "w.bin"), make([]byte, 100), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, partPrefix+"copying"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A file system of 1000 bytes holding 300 besides the cache's 500.
	old := fsUsage
	t.Cleanup(func() { fsUsage = old })
	fsUsage = func(string) (int64, int64, error) { return 1000, 300 + DirBytes(dir), nil }
	names := func(es []Evicted) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Digest)
		}
		return out
	}
	left := func() []string {
		es, _ := os.ReadDir(dir)
		var out []string
		for _, e := range es {
			out = append(out, e.Name())
		}
		return out
	}

	// A copy no eviction makes room for (a listing's sizes are the
	// store's word) removes nothing.
	if ev, err := gcCache(dir, 600, "keep", now); err == nil || len(ev) != 0 || len(left()) != 6 {
		t.Fatalf("a copy of 600 bytes, 300 evictable: evicted %v, %v, left %v; want an error and nothing removed", names(ev), err, left())
	}
	if ev, err := gcCache(dir, 50, "keep", now); err != nil || len(ev) != 0 {
		t.Fatalf("850 of 1000 with the copy: evicted %v, %v; want nothing", names(ev), err)
	}
	ev, err := gcCache(dir, 100, "keep", now)
	if err != nil || !slices.Equal(names(ev), []string{"a"}) || ev[0].Bytes != 100 {
		t.Fatalf("900 of 1000 with the copy: evicted %+v, %v; want a, the least recently used, down to 800", ev, err)
	}
	ev, err = gcCache(dir, 300, "keep", now)
	if err != nil || !slices.Equal(names(ev), []string{"b", "c"}) {
		t.Fatalf("1000 of 1000 with the copy: evicted %v, %v; want b then c (the entry being fetched and the recent one stay)", names(ev), err)
	}
	if got := left(); !slices.Equal(got, []string{partPrefix + "copying", "keep", "recent"}) {
		t.Errorf("the cache holds %v", got)
	}
}

// TestKeepUsed: while a replica runs on a cache entry, the entry is marked
// used at least every CacheMinAge/2, so the garbage collection (which
// spares what was used within CacheMinAge) never takes it; once the
// replica ends, the marks stop.
func TestKeepUsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		old := time.Now().Add(-24 * time.Hour)
		if err := os.Chtimes(dir, old, old); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); KeepUsed(ctx, dir) }()
		for range 5 {
			time.Sleep(CacheMinAge)
			synctest.Wait()
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if age := time.Since(fi.ModTime()); age > CacheMinAge/2 {
				t.Fatalf("the entry was last marked used %v ago, want within %v", age, CacheMinAge/2)
			}
		}
		cancel()
		<-done
		fi, _ := os.Stat(dir)
		time.Sleep(CacheMinAge)
		synctest.Wait()
		if fi2, _ := os.Stat(dir); !fi2.ModTime().Equal(fi.ModTime()) {
			t.Error("the entry was marked used after the replica ended")
		}
	})
}
