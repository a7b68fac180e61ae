// Package datasync moves a volume's data between a directory and an S3
// container with requests signed elsewhere (docs/data.md): Pull copies
// every object under the volume's prefix into the directory, Push copies
// back what changed and, for RWD, deletes what the job deleted. It holds
// no credential: a Signer (the platform, over the fabric) gives it a
// presigned request for each listing and object, and the data goes
// between the directory and the store directly. Standard library only: it
// runs in the agents.
package datasync

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
)

// Op is what a signed request does.
type Op string

// The operations.
const (
	OpList   Op = "list"   // one page of ListObjectsV2 under the volume's prefix
	OpGet    Op = "get"    // read an object
	OpPut    Op = "put"    // write an object (RW, RWD)
	OpDelete Op = "delete" // delete an object (RWD)
)

// SignedRequest is a presigned request: its method and URL, good until
// Expires.
type SignedRequest struct {
	Method  string    `json:"method"`
	URL     string    `json:"url"`
	Expires time.Time `json:"expires"`
}

// Signer signs requests for one volume: a listing page after token (keys
// empty), or one request per key, in keys' order.
type Signer interface {
	Sign(ctx context.Context, op Op, keys []string, token string) ([]SignedRequest, error)
}

// MaxKey bounds a volume-relative key, in bytes (S3's bound on a whole
// key is 1024).
const MaxKey = 1024

// CheckKey refuses a volume-relative key that is not a clean relative
// path: empty, absolute, with a "." or ".." segment, an empty segment, a
// NUL, or too long. Both ends check it: the signer, so that a job signs
// nothing outside its prefix; Pull, so that an object named to escape the
// directory ("../../etc/passwd", written to the bucket by anyone) is
// never written outside it.
func CheckKey(k string) error {
	if k == "" || len(k) > MaxKey || strings.HasPrefix(k, "/") || strings.ContainsRune(k, 0) {
		return fmt.Errorf("object key %q: not a relative path", clip(k))
	}
	for _, seg := range strings.Split(k, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("object key %q: a %q segment", clip(k), seg)
		}
	}
	if path.Clean(k) != k {
		return fmt.Errorf("object key %q: not a clean path", clip(k))
	}
	return nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// ErrRefused is the error of a request the store refused for its
// credentials or its signature (403).
var ErrRefused = errors.New("the datastore refused the request (403: bad credentials or an expired signature)")
