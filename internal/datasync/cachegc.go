package datasync

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The cache's garbage collection, as the kubelet's of images: when the
// file system that holds the cache would be more than CacheHighPercent
// full (after a copy, counting the copy about to be made), the entries
// used least recently go until it would be CacheLowPercent full. The
// entry being fetched stays, and so does every entry used in the last
// CacheMinAge (a replica that found it may be loading it now). A Fetch
// that finds its entry marks it used (its directory's modification
// time). The operator sizes the disk; nothing needs configuring.
const (
	CacheHighPercent = 85
	CacheLowPercent  = 80
	CacheMinAge      = 10 * time.Minute
)

// markUsed marks a cache entry used now (its directory's modification
// time): the garbage collection takes it last, and not within
// CacheMinAge.
func markUsed(dir string) {
	now := time.Now()
	os.Chtimes(dir, now, now)
}

// KeepUsed marks the cache entry dir used every CacheMinAge/2 until ctx
// ends: what a replica that runs on it calls, so that the entry is never
// taken from under a runtime that may restart on it.
func KeepUsed(ctx context.Context, dir string) {
	t := time.NewTicker(CacheMinAge / 2)
	defer t.Stop()
	for {
		markUsed(dir)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// fsUsage is the size of the file system that holds dir and the bytes
// used on it (what is not available to an unprivileged writer); tests
// replace it.
var fsUsage = func(dir string) (total, used int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	total = int64(st.Blocks) * st.Bsize
	return total, total - int64(st.Bavail)*st.Bsize, nil
}

// gcMu makes one garbage collection of this process run at a time.
var gcMu sync.Mutex

// Evicted is a cache entry a garbage collection removed.
type Evicted struct {
	Digest string
	Bytes  int64
	Used   time.Time // when it was last used
}

// gcCache removes the least recently used entries of cacheDir, other
// than keep and those used since now-CacheMinAge, while the file system
// would be more than CacheHighPercent full with need bytes more, until
// it would be CacheLowPercent full. It answers what it removed, or an
// error, removing nothing, when even all of those would not make room.
func gcCache(cacheDir string, need int64, keep string, now time.Time) ([]Evicted, error) {
	gcMu.Lock()
	defer gcMu.Unlock()
	total, used, err := fsUsage(cacheDir)
	if err != nil || total <= 0 || (used+need)*100 <= total*CacheHighPercent {
		return nil, err
	}
	toFree := used + need - total*CacheLowPercent/100
	entries, err := os.ReadDir(cacheDir)
	if err != nil {
		return nil, err
	}
	type entry struct {
		name  string
		used  time.Time
		bytes int64
	}
	var old []entry
	var evictable int64
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), partPrefix) || e.Name() == keep {
			continue
		}
		fi, err := e.Info()
		if err != nil || now.Sub(fi.ModTime()) < CacheMinAge {
			continue
		}
		n := DirBytes(filepath.Join(cacheDir, e.Name()))
		old = append(old, entry{e.Name(), fi.ModTime(), n})
		evictable += n
	}
	if (used-evictable+need)*100 > total*CacheHighPercent {
		// No eviction makes room for it: none is made. A listing's sizes
		// are the store's word, and a store that claims more than can
		// fit must not empty every team's entries.
		return nil, fmt.Errorf("%d bytes do not fit in the cache's file system (%d of %d bytes used, %d of them by entries unused for %v)",
			need, used, total, evictable, CacheMinAge)
	}
	slices.SortFunc(old, func(a, b entry) int { return cmp.Or(a.used.Compare(b.used), strings.Compare(a.name, b.name)) })
	var out []Evicted
	for _, e := range old {
		if toFree <= 0 {
			break
		}
		dir := filepath.Join(cacheDir, e.name)
		// An entry a Fetch of this process holds now is skipped (it is
		// being found, and waiting for it could deadlock with a Fetch
		// that waits for this collection); moved aside first, an entry
		// is never found half removed.
		mu, _ := fetching.LoadOrStore(dir, new(sync.Mutex))
		if !mu.(*sync.Mutex).TryLock() {
			continue
		}
		n := e.bytes
		gone := filepath.Join(cacheDir, partPrefix+rand.Text()[:16])
		err := os.Rename(dir, gone)
		mu.(*sync.Mutex).Unlock()
		if err != nil {
			continue
		}
		if err := os.RemoveAll(gone); err != nil {
			return out, err
		}
		toFree -= n
		out = append(out, Evicted{Digest: e.name, Bytes: n, Used: e.used})
	}
	return out, nil
}

// DirBytes is the size of the regular files under dir, the walk's errors
// skipped (a cache entry's; a simulated rack's standalone volume's).
func DirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
