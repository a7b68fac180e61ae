// Package webui serves CosmicAC's web interface (app-ui): the single page
// built from web/ by esbuild into dist/ and embedded in the binary, with no
// asset from anywhere else. The gateway sends it every path outside /api,
// /inference and /monitor; a path that is no file is the page itself
// (index.html), whose router shows it. The page speaks only the public
// HTTP API (docs/webui.md).
//
// It uses the standard library only, so that any component may serve it.
package webui

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
)

//go:embed dist
var dist embed.FS

// CSP is the page's Content-Security-Policy: its own scripts and styles
// only (inline styles for the terminal's), no frames of it elsewhere, and
// requests to its own origin only (the API, the logs, the terminal's
// WebSocket, the inference playground).
const CSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"

// asset is one embedded file, with its gzip form when that is smaller.
type asset struct {
	name  string
	body  []byte
	gz    []byte
	etag  string
	ctype string
	// immutable: the name holds the content's hash (esbuild's chunks).
	immutable bool
}

// Handler serves the interface.
type Handler struct {
	assets map[string]*asset
	index  *asset
}

// New returns the handler of the embedded files. They are hashed and
// compressed once per process (the first New): the files are the binary's
// own and the Handler is read-only, so every platform a process starts (a
// test starts dozens) shares one.
func New() (*Handler, error) { return load() }

var load = sync.OnceValues(build)

// build loads the embedded files, hashes and compresses them.
func build() (*Handler, error) {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		return nil, err
	}
	h := &Handler{assets: map[string]*asset{}}
	err = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		a := &asset{name: p, body: b, etag: `"` + hex.EncodeToString(sum[:12]) + `"`,
			ctype: mime.TypeByExtension(path.Ext(p)), immutable: strings.HasPrefix(p, "chunk-")}
		if a.ctype == "" {
			a.ctype = "application/octet-stream"
		}
		if strings.HasSuffix(p, ".txt") {
			a.ctype = "text/plain; charset=utf-8"
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(b)
		zw.Close()
		if buf.Len() < len(b) {
			a.gz = buf.Bytes()
		}
		h.assets["/"+p] = a
		return nil
	})
	if err != nil {
		return nil, err
	}
	if h.index = h.assets["/index.html"]; h.index == nil {
		return nil, fmt.Errorf("webui: the build has no index.html (run hack/webui.sh)")
	}
	return h, nil
}

// Size is the bytes the embedded files take, and gzipped as served.
func (h *Handler) Size() (raw, gz int) {
	for _, a := range h.assets {
		raw += len(a.body)
		if a.gz != nil {
			gz += len(a.gz)
		} else {
			gz += len(a.body)
		}
	}
	return raw, gz
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	a := h.assets[r.URL.Path]
	if a == nil || a == h.index {
		if path.Ext(r.URL.Path) != "" && r.URL.Path != "/index.html" {
			// A missing file (an old chunk after an upgrade) is a 404,
			// not the page: a script must not receive HTML.
			http.NotFound(w, r)
			return
		}
		a = h.index
	}
	hd := w.Header()
	hd.Set("Content-Type", a.ctype)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Vary", "Accept-Encoding")
	if a == h.index {
		hd.Set("Content-Security-Policy", CSP)
		hd.Set("X-Frame-Options", "DENY")
	}
	if a.immutable {
		hd.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		hd.Set("Cache-Control", "no-cache") // revalidated by ETag: a new build shows at once
	}
	body, etag := a.body, a.etag
	if a.gz != nil && acceptsGzip(r) {
		hd.Set("Content-Encoding", "gzip")
		body, etag = a.gz, strings.TrimSuffix(a.etag, `"`)+`-gz"`
	}
	hd.Set("ETag", etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) == "gzip" && strings.TrimSpace(q) != "q=0" {
			return true
		}
	}
	return false
}
