package datasync

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
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
