package datasync

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Fetched is what Fetch did.
type Fetched struct {
	// Dir is the cache's directory of the objects.
	Dir string
	// Warm says the directory was in the cache already: nothing moved.
	Warm bool
	// Digest names the content: the SHA-256 of the listing's keys, sizes
	// and ETags, in key order.
	Digest string
	// Evicted are the entries the cache's garbage collection removed to
	// make room (gcCache).
	Evicted []Evicted
	Stats
}

// Fetch makes the objects under a source's prefix a directory of
// cacheDir named by their content, cacheDir/DIGEST, where DIGEST is the
// SHA-256 of scope and the listing (each object's key, size and ETag),
// and copies them only when no such directory is there yet: a node's
// content-addressed cache of model weights (docs/data.md, "Model weights
// from a datastore"). The next replica, or the next job, of the same
// scope that asks for the same content finds it, whatever its alias or
// bucket. The scope is the team: a listing is the store's word, and a
// team that runs its own store could list another's content and serve
// other bytes; within a team, the entries are shared. A copy goes to
// a directory of a random name first, each object checked against the
// listing (its size, and its MD5 where its ETag is one: a single-part
// upload's), and is renamed into place whole, so a directory of the
// cache is always complete; two fetches at once both copy, and the second
// to finish drops its copy. A copy that would fill the cache's file system
// past CacheHighPercent first removes the entries used least recently
// (gcCache), and a warm find marks its entry used.
func Fetch(ctx context.Context, s Signer, cacheDir, scope string, opt Options) (Fetched, error) {
	hc := client(opt)
	objs, skipped, err := list(ctx, s, hc)
	if err != nil {
		return Fetched{}, err
	}
	if len(objs) == 0 {
		return Fetched{}, errors.New("no object under the prefix")
	}
	slices.SortFunc(objs, func(a, b remoteObject) int { return strings.Compare(a.key, b.key) })
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", scope)
	for _, o := range objs {
		fmt.Fprintf(h, "%s\x00%d\x00%s\n", o.key, o.size, o.etag)
	}
	f := Fetched{Digest: hex.EncodeToString(h.Sum(nil))}
	f.Dir = filepath.Join(cacheDir, f.Digest)
	// Fetches of one content in this process take turns: the second
	// replica of a job on a node waits for the first's copy, then finds
	// it (other processes each copy, and the last to finish drops its
	// own).
	mu, _ := fetching.LoadOrStore(f.Dir, new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	if st, err := os.Stat(f.Dir); err == nil && st.IsDir() {
		f.Warm = true
		markUsed(f.Dir)
		return f, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return Fetched{}, err
	}
	var need int64
	for _, o := range objs {
		need += o.size
	}
	f.Evicted, err = gcCache(cacheDir, need, f.Digest, time.Now())
	if err != nil {
		return Fetched{}, fmt.Errorf("make room in the cache: %w", err)
	}
	tmp := filepath.Join(cacheDir, partPrefix+rand.Text()[:16])
	defer os.RemoveAll(tmp) // gone once renamed; else what a failure left
	f.Stats, err = pullListed(ctx, s, hc, tmp, objs, skipped, opt)
	if err != nil {
		return Fetched{}, err
	}
	if err := checkFetched(tmp, objs); err != nil {
		return Fetched{}, err
	}
	if err := os.Rename(tmp, f.Dir); err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTEMPTY) {
			if st, serr := os.Stat(f.Dir); serr == nil && st.IsDir() {
				markUsed(f.Dir)
				return f, nil // another fetch of the same content finished first
			}
		}
		return Fetched{}, err
	}
	markUsed(f.Dir) // the copy may have taken longer than CacheMinAge
	return f, nil
}

// fetching holds a mutex for each cache directory a Fetch of this process
// fills or has filled.
var fetching sync.Map

// checkFetched checks each copied object against its listing: its size,
// and its MD5 where the ETag is a plain MD5 (a multipart upload's is
// not). An object the store did not serve (deleted since the listing)
// fails the fetch: a cache entry is the whole listing or nothing.
func checkFetched(dir string, objs []remoteObject) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, o := range objs {
		st, err := root.Stat(filepath.FromSlash(o.key))
		if err != nil {
			return fmt.Errorf("fetch %s: %w", o.key, err)
		}
		if st.Size() != o.size {
			return fmt.Errorf("fetch %s: %d bytes, the listing says %d", o.key, st.Size(), o.size)
		}
		if len(o.etag) == 32 && isHex(o.etag) {
			sum, err := md5File(root, o.key)
			if err != nil {
				return fmt.Errorf("fetch %s: %w", o.key, err)
			}
			if sum != strings.ToLower(o.etag) {
				return fmt.Errorf("fetch %s: its MD5 %s is not its ETag %s", o.key, sum, o.etag)
			}
		}
	}
	return nil
}

func isHex(s string) bool {
	_, err := strconv.ParseUint(s[:16], 16, 64)
	_, err2 := strconv.ParseUint(s[16:], 16, 64)
	return err == nil && err2 == nil
}
