package datasync

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Options tune a Pull or a Push.
type Options struct {
	// Client makes the requests (nil: a client of its own).
	Client *http.Client
	// Parallel is how many objects move at once (0: 4).
	Parallel int
	// Progress, when set, is told what has moved so far, from any
	// goroutine, after each object.
	Progress func(Stats)
}

// Stats say what a Pull or a Push did.
type Stats struct {
	Objects int64 // objects copied
	Bytes   int64 // their bytes
	// Unchanged are the files a Push found already in the store.
	Unchanged int64
	// Deleted are the remote objects a Push deleted (RWD).
	Deleted int64
	// ListedObjects and ListedBytes are what a Pull's listing holds:
	// the whole of what it copies (Progress says so from the start).
	ListedObjects, ListedBytes int64
	// Skipped are keys that are no path in a directory (an object named
	// "../x" or "a//b") or local files that are not regular (symbolic
	// links, devices): not copied, listed for the job's log.
	Skipped []string
}

// Errors a store's answer maps to (docs/data.md: a job's sync reason).
var (
	// ErrNoContainer is a listing's 404: the container does not exist.
	ErrNoContainer = errors.New("the container does not exist in the datastore (404 NoSuchBucket)")
	// ErrUnreachable is a request that got no answer from the store.
	ErrUnreachable = errors.New("the datastore did not answer")
)

// remoteObject is one object of a listing.
type remoteObject struct {
	key  string // volume-relative
	size int64
	etag string // without quotes
}

// list lists every object under the volume's prefix.
func list(ctx context.Context, s Signer, hc *http.Client) ([]remoteObject, []string, error) {
	var out []remoteObject
	var skipped []string
	token := ""
	seen := map[string]bool{}
	for {
		reqs, err := s.Sign(ctx, OpList, nil, token)
		if err != nil {
			return nil, nil, err
		}
		if len(reqs) != 1 {
			return nil, nil, fmt.Errorf("list: %d signed requests, want 1", len(reqs))
		}
		var page struct {
			Prefix   string `xml:"Prefix"`
			Contents []struct {
				Key  string `xml:"Key"`
				Size int64  `xml:"Size"`
				ETag string `xml:"ETag"`
			} `xml:"Contents"`
			IsTruncated           bool   `xml:"IsTruncated"`
			NextContinuationToken string `xml:"NextContinuationToken"`
		}
		if err := do(ctx, hc, reqs[0], nil, -1, func(r io.Reader) error {
			return xml.NewDecoder(io.LimitReader(r, 64<<20)).Decode(&page)
		}); err != nil {
			if errors.Is(err, errNotFound) {
				return nil, nil, ErrNoContainer
			}
			return nil, nil, fmt.Errorf("list: %w", err)
		}
		for _, c := range page.Contents {
			k, ok := strings.CutPrefix(c.Key, page.Prefix)
			if !ok {
				continue
			}
			if strings.HasSuffix(k, "/") && c.Size == 0 {
				continue // a "directory" marker
			}
			if CheckKey(k) != nil {
				skipped = addSkipped(skipped, c.Key)
				continue
			}
			out = append(out, remoteObject{key: k, size: c.Size, etag: strings.Trim(c.ETag, `"`)})
		}
		if len(out) > MaxObjects {
			return nil, nil, fmt.Errorf("list: more than %d objects under the volume's prefix: give it a narrower prefix", MaxObjects)
		}
		if !page.IsTruncated || page.NextContinuationToken == "" {
			return out, skipped, nil
		}
		if seen[page.NextContinuationToken] {
			return nil, nil, fmt.Errorf("list: the store gave the same continuation token twice")
		}
		seen[page.NextContinuationToken] = true
		token = page.NextContinuationToken
	}
}

// MaxObjects bounds the objects of one volume (a listing is held whole).
const MaxObjects = 1_000_000

// MaxSkipped bounds the names a Stats lists as skipped; past it, one
// entry says how many more.
const MaxSkipped = 100

// addSkipped adds name to skipped, within MaxSkipped.
func addSkipped(skipped []string, name string) []string {
	switch {
	case len(skipped) < MaxSkipped:
		return append(skipped, name)
	case len(skipped) == MaxSkipped:
		return append(skipped, "… and more")
	}
	return skipped
}

var errNotFound = errors.New("404")

// do makes a signed request with body (of size bytes, -1: none) and hands
// a 2xx answer's body to read.
func do(ctx context.Context, hc *http.Client, sr SignedRequest, body io.Reader, size int64, read func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, sr.Method, sr.URL, body)
	if err != nil {
		return err
	}
	if size >= 0 {
		req.ContentLength = size
		if size == 0 {
			req.Body = http.NoBody
		}
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// net/http's error names the URL, whose query is the signature:
		// only the method, the object and the cause are said.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("%w: %s %s: %v", ErrUnreachable, sr.Method, redact(sr.URL), err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusForbidden:
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return ErrRefused
	case resp.StatusCode == http.StatusNotFound:
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return errNotFound
	case resp.StatusCode/100 != 2:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %s: %s", sr.Method, redact(sr.URL), resp.Status, strings.TrimSpace(string(b)))
	}
	if read != nil {
		return read(resp.Body)
	}
	io.Copy(io.Discard, resp.Body)
	return nil
}

// redact is a signed URL without its query (the signature).
func redact(u string) string {
	u, _, _ = strings.Cut(u, "?")
	return u
}

// signBatch is how many keys one Sign call carries.
const signBatch = 256

// expiryMargin is how long a signed request must still be good when its
// transfer starts; one closer to its end is signed again.
const expiryMargin = 5 * time.Minute

// each signs op for keys in batches and runs fn on each key's request,
// opt.Parallel at a time; the first error ends it.
func each(ctx context.Context, s Signer, op Op, keys []string, opt Options, fn func(ctx context.Context, i int, sr SignedRequest) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	par := opt.Parallel
	if par <= 0 {
		par = 4
	}
	var (
		wg       sync.WaitGroup
		firstErr error
		once     sync.Once
	)
	work := make(chan int)
	reqs := make([]SignedRequest, len(keys))
	for range par {
		wg.Go(func() {
			for i := range work {
				sr := reqs[i]
				if !sr.Expires.IsZero() && time.Until(sr.Expires) < expiryMargin {
					// Signed with its batch, it waited behind the others
					// for long: signed again rather than refused.
					again, err := s.Sign(ctx, op, keys[i:i+1], "")
					if err == nil && len(again) != 1 {
						err = fmt.Errorf("%s: %d signed requests for 1 key", op, len(again))
					}
					if err != nil {
						once.Do(func() { firstErr = err; cancel() })
						continue
					}
					sr = again[0]
				}
				if err := fn(ctx, i, sr); err != nil {
					once.Do(func() { firstErr = err; cancel() })
				}
			}
		})
	}
	var signErr error
feed:
	for start := 0; start < len(keys); start += signBatch {
		end := min(start+signBatch, len(keys))
		signed, err := s.Sign(ctx, op, keys[start:end], "")
		if err == nil && len(signed) != end-start {
			err = fmt.Errorf("%s: %d signed requests for %d keys", op, len(signed), end-start)
		}
		if err != nil {
			signErr = err
			break
		}
		copy(reqs[start:end], signed)
		for i := start; i < end; i++ {
			select {
			case work <- i:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if signErr != nil {
		return signErr
	}
	return ctx.Err()
}

func client(opt Options) *http.Client {
	if opt.Client != nil {
		return opt.Client
	}
	return &http.Client{}
}

// Pull copies every object under the volume's prefix into dir (made if
// absent), each written whole to a temporary file and renamed into place.
func Pull(ctx context.Context, s Signer, dir string, opt Options) (Stats, error) {
	hc := client(opt)
	objs, skipped, err := list(ctx, s, hc)
	if err != nil {
		return Stats{}, err
	}
	return pullListed(ctx, s, hc, dir, objs, skipped, opt)
}

// pullListed copies the listed objects into dir.
func pullListed(ctx context.Context, s Signer, hc *http.Client, dir string, objs []remoteObject, skipped []string, opt Options) (Stats, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Stats{}, err
	}
	root, err := os.OpenRoot(dir) // no key, however named, writes outside dir
	if err != nil {
		return Stats{}, err
	}
	defer root.Close()
	var st Stats
	st.Skipped = skipped
	for _, o := range objs {
		st.ListedObjects++
		st.ListedBytes += o.size
	}
	if opt.Progress != nil {
		opt.Progress(Stats{ListedObjects: st.ListedObjects, ListedBytes: st.ListedBytes})
	}
	var n, bytes atomic.Int64
	var mu sync.Mutex
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.key
	}
	err = each(ctx, s, OpGet, keys, opt, func(ctx context.Context, i int, sr SignedRequest) error {
		k := keys[i]
		d := filepath.Dir(filepath.FromSlash(k))
		if d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		// The part file's name is random and short: no object's name can
		// be it (a key "x.part" would otherwise collide with x's), and a
		// long key's name does not grow past the file system's bound.
		tmp := filepath.Join(d, partPrefix+rand.Text()[:16])
		f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		var wrote int64
		err = do(ctx, hc, sr, nil, -1, func(r io.Reader) error {
			wrote, err = io.Copy(f, r)
			return err
		})
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if errors.Is(err, errNotFound) { // deleted since the listing, or a name the store lists but cannot serve
			root.Remove(tmp)
			mu.Lock()
			st.Skipped = addSkipped(st.Skipped, k)
			mu.Unlock()
			return nil
		}
		if err == nil {
			err = root.Rename(tmp, filepath.FromSlash(k))
		}
		if err != nil {
			root.Remove(tmp)
			return fmt.Errorf("get %s: %w", k, err)
		}
		n.Add(1)
		bytes.Add(wrote)
		if opt.Progress != nil {
			mu.Lock()
			opt.Progress(Stats{Objects: n.Load(), Bytes: bytes.Load(), ListedObjects: st.ListedObjects, ListedBytes: st.ListedBytes})
			mu.Unlock()
		}
		return nil
	})
	st.Objects, st.Bytes = n.Load(), bytes.Load()
	return st, err
}

// Push copies to the store every regular file under dir that the store
// does not hold as it is (by size and MD5, the ETag of a single-part
// upload), and with deleteRemote deletes the remote objects no file
// matches (RWD). Symbolic links and other files that are not regular are
// skipped, not followed.
func Push(ctx context.Context, s Signer, dir string, deleteRemote bool, opt Options) (Stats, error) {
	hc := client(opt)
	objs, skipped, err := list(ctx, s, hc)
	if err != nil {
		return Stats{}, err
	}
	remote := make(map[string]remoteObject, len(objs))
	for _, o := range objs {
		remote[o.key] = o
	}
	var st Stats
	st.Skipped = skipped
	var puts []string
	sizes := map[string]int64{}
	local := map[string]bool{}
	// Through an os.Root of dir (dir itself may be a link, as a mount
	// point can be): a file the job turns into a link to elsewhere between
	// the walk and its upload is refused, not followed.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return st, err
	}
	defer root.Close()
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		k := p
		switch {
		case p == ".", d.IsDir():
			return nil
		case !d.Type().IsRegular():
			st.Skipped = addSkipped(st.Skipped, k)
			return nil
		case CheckKey(k) != nil:
			st.Skipped = addSkipped(st.Skipped, k)
			return nil
		}
		local[k] = true
		info, err := d.Info()
		if err != nil {
			return err
		}
		if r, ok := remote[k]; ok && r.size == info.Size() {
			if sum, err := md5File(root, k); err == nil && sum == r.etag {
				st.Unchanged++
				return nil
			}
		}
		puts = append(puts, k)
		sizes[k] = info.Size()
		return nil
	})
	if err != nil {
		return st, err
	}
	var n, bytes atomic.Int64
	var mu sync.Mutex
	err = each(ctx, s, OpPut, puts, opt, func(ctx context.Context, i int, sr SignedRequest) error {
		k := puts[i]
		f, err := openRegular(root, k)
		if err != nil {
			return fmt.Errorf("put %s: %w", k, err)
		}
		defer f.Close()
		if err := do(ctx, hc, sr, f, sizes[k], nil); err != nil {
			return fmt.Errorf("put %s: %w", k, err)
		}
		n.Add(1)
		bytes.Add(sizes[k])
		if opt.Progress != nil {
			mu.Lock()
			opt.Progress(Stats{Objects: n.Load(), Bytes: bytes.Load()})
			mu.Unlock()
		}
		return nil
	})
	st.Objects, st.Bytes = n.Load(), bytes.Load()
	if err != nil || !deleteRemote {
		return st, err
	}
	var dels []string
	for _, o := range objs {
		if !local[o.key] {
			dels = append(dels, o.key)
		}
	}
	var deleted atomic.Int64
	err = each(ctx, s, OpDelete, dels, opt, func(ctx context.Context, i int, sr SignedRequest) error {
		if err := do(ctx, hc, sr, nil, -1, nil); err != nil && !errors.Is(err, errNotFound) {
			return fmt.Errorf("delete %s: %w", dels[i], err)
		}
		deleted.Add(1)
		return nil
	})
	st.Deleted = deleted.Load()
	return st, err
}

// partPrefix starts the name of a file Pull is writing.
const partPrefix = ".cosmicac-part-"

// openRegular opens k under root if it is a regular file, never a link
// (O_NOFOLLOW) nor anything else.
func openRegular(root *os.Root, k string) (*os.File, error) {
	f, err := root.OpenFile(filepath.FromSlash(k), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is no longer a regular file", k)
	}
	return f, nil
}

func md5File(root *os.Root, k string) (string, error) {
	f, err := openRegular(root, k)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := md5.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
