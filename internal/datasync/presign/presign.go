// Package presign signs the requests a job's volume needs against its
// datastore (docs/data.md, "The platform signs; the job transfers"): S3
// SigV4 query signing (presigned URLs), each request for one method and
// one object, or one listing, under the volume's own container and prefix,
// valid for minutes. The secret key stays with the signer; the job gets
// the URLs. It is the app-node's; the agents import internal/datasync,
// which carries the requests and needs no key.
package presign

import (
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/cosmicac/cosmicac/internal/datasync"
)

// Volume is what a signer may sign for: one container and prefix of one
// datastore, with what the volume's permission allows.
type Volume struct {
	Endpoint  string // scheme://host[:port]
	Region    string
	AccessKey string
	SecretKey string
	Container string
	// Prefix is the volume's prefix in the container ("" for all of it);
	// a key is Prefix joined with the volume-relative key.
	Prefix string
	// Put and Delete say whether the volume may write and delete (RW,
	// RWD); reads and listings always may.
	Put, Delete bool
	// Archive says the volume is one object, at Prefix itself
	// (dataStore.archive): its only key is datasync.ArchiveKey, to get
	// or put; no listing, no delete.
	Archive bool
}

// MaxKeys bounds the keys of one Sign call.
const MaxKeys = 1000

// Sign signs op for keys (volume-relative, as datasync.CheckKey allows
// them) of v, valid for ttl; a list takes no key and signs one page
// after token (ListObjectsV2's continuation token, "" for the first).
func Sign(v Volume, op datasync.Op, keys []string, token string, ttl time.Duration, now time.Time) ([]datasync.SignedRequest, error) {
	method := ""
	switch op {
	case datasync.OpList:
		if len(keys) > 0 {
			return nil, fmt.Errorf("a listing takes no keys")
		}
	case datasync.OpGet:
		method = http.MethodGet
	case datasync.OpPut:
		if !v.Put {
			return nil, fmt.Errorf("the volume is read only: no put")
		}
		method = http.MethodPut
	case datasync.OpDelete:
		if !v.Delete {
			return nil, fmt.Errorf("the volume's permission is not RWD: no delete")
		}
		method = http.MethodDelete
	default:
		return nil, fmt.Errorf("unknown operation %q", op)
	}
	if len(keys) > MaxKeys {
		return nil, fmt.Errorf("%d keys: at most %d a call", len(keys), MaxKeys)
	}
	base, err := url.Parse(v.Endpoint)
	if err != nil || base.Host == "" {
		return nil, fmt.Errorf("datastore endpoint %q: not a URL", v.Endpoint)
	}
	secs := int64(ttl / time.Second)
	expires := now.Add(ttl)
	sign := func(method string, u *url.URL) datasync.SignedRequest {
		req := http.Request{Method: method, URL: u, Host: u.Host, Header: http.Header{}}
		signed := signer.PreSignV4(req, v.AccessKey, v.SecretKey, "", v.Region, secs)
		return datasync.SignedRequest{Method: method, URL: signed.URL.String(), Expires: expires}
	}
	bucket := "/" + v.Container
	if v.Archive {
		if op == datasync.OpList || op == datasync.OpDelete || len(keys) != 1 || keys[0] != datasync.ArchiveKey {
			return nil, fmt.Errorf("an archive volume is one object: get or put its key %q alone", datasync.ArchiveKey)
		}
		if v.Prefix == "" {
			return nil, fmt.Errorf("an archive volume's prefix is its object's key: none given")
		}
		u := *base
		u.Path = bucket + "/" + strings.TrimSuffix(path.Clean(v.Prefix), "/")
		return []datasync.SignedRequest{sign(method, &u)}, nil
	}
	if op == datasync.OpList {
		u := *base
		u.Path = bucket
		q := url.Values{"list-type": {"2"}}
		if v.Prefix != "" {
			q.Set("prefix", prefixDir(v.Prefix))
		}
		if token != "" {
			q.Set("continuation-token", token)
		}
		u.RawQuery = q.Encode()
		return []datasync.SignedRequest{sign(http.MethodGet, &u)}, nil
	}
	out := make([]datasync.SignedRequest, 0, len(keys))
	for _, k := range keys {
		if err := datasync.CheckKey(k); err != nil {
			return nil, err
		}
		u := *base
		u.Path = bucket + "/" + ObjectKey(v.Prefix, k)
		out = append(out, sign(method, &u))
	}
	return out, nil
}

// ObjectKey is the object key of volume-relative key k under prefix.
func ObjectKey(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefixDir(prefix) + k
}

// prefixDir is prefix as a directory of keys: "data" and "data/" both
// hold data/x, never datax.
func prefixDir(prefix string) string {
	return strings.TrimSuffix(path.Clean(prefix), "/") + "/"
}
