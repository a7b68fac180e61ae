package datasync_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/cosmicac/cosmicac/internal/datasync"
	"github.com/cosmicac/cosmicac/internal/s3test"
)

// BenchmarkPull copies a volume in from the real S3 server, two ways in
// one run: datasync.Pull with presigned requests (what a job's agent
// does), and the baseline, minio-go's own client listing and getting the
// same objects with its credentials, as many at a time (4) into files (as
// `aws s3 cp --recursive` or `mc cp` would). Two shapes of the same total
// (COSMICAC_BENCH_SYNC_MB, default 256 MiB): many small objects (64 KiB)
// and few large ones (64 MiB), the way that goes first alternating
// between rounds. It reports MB/s of each (the last round's).
//
//	COSMICAC_S3_SERVER=$(hack/build-s3.sh --print-dest)/versitygw \
//	  go test -run '^$' -bench Pull -benchtime 3x ./internal/datasync
func BenchmarkPull(b *testing.B) {
	total := 256 << 20
	if v := os.Getenv("COSMICAC_BENCH_SYNC_MB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatal(err)
		}
		total = n << 20
	}
	srv := s3test.Start(b)
	c := srv.Client(b)
	srv.MakeBucket(b, "bench")
	ctx := context.Background()
	shapes := []struct {
		name string
		size int
	}{{"small", 64 << 10}, {"large", 64 << 20}}
	for _, sh := range shapes {
		buf := make([]byte, sh.size)
		rand.Read(buf)
		n := max(total/sh.size, 1)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for i := range n {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if _, err := c.PutObject(ctx, "bench", fmt.Sprintf("%s/%06d", sh.name, i), bytes.NewReader(buf), int64(len(buf)), minio.PutObjectOptions{}); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
	round := 0
	for b.Loop() {
		round++
		for _, sh := range shapes {
			bytesOf := int64(max(total/sh.size, 1) * sh.size)
			ways := []string{"datasync", "minio-go"}
			if round%2 == 0 { // who goes first alternates (the server's page cache)
				ways[0], ways[1] = ways[1], ways[0]
			}
			for _, way := range ways {
				dir := b.TempDir()
				start := nanotime()
				switch way {
				case "datasync":
					st, err := datasync.Pull(ctx, signer{volume(srv, "bench", sh.name, false, false)}, dir, datasync.Options{})
					if err != nil || st.Bytes != bytesOf {
						b.Fatalf("pull: %+v, %v", st, err)
					}
				case "minio-go":
					if got := minioPull(b, c, sh.name, dir); got != bytesOf {
						b.Fatalf("minio-go: %d bytes, want %d", got, bytesOf)
					}
				}
				el := nanotime() - start
				b.ReportMetric(float64(bytesOf)/1e6/(float64(el)/1e9), sh.name+"-"+way+"-MB/s")
				os.RemoveAll(dir)
			}
		}
	}
}

// minioPull lists prefix and gets each object into dir, 4 at a time, with
// minio-go's client: the baseline.
func minioPull(b *testing.B, c *minio.Client, prefix, dir string) int64 {
	ctx := context.Background()
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		got int64
	)
	work := make(chan minio.ObjectInfo)
	for range 4 {
		wg.Go(func() {
			for o := range work {
				p := filepath.Join(dir, filepath.FromSlash(o.Key))
				if err := c.FGetObject(ctx, "bench", o.Key, p, minio.GetObjectOptions{}); err != nil {
					b.Error(err)
					continue
				}
				mu.Lock()
				got += o.Size
				mu.Unlock()
			}
		})
	}
	for o := range c.ListObjects(ctx, "bench", minio.ListObjectsOptions{Prefix: prefix + "/", Recursive: true}) {
		if o.Err != nil {
			b.Fatal(o.Err)
		}
		work <- o
	}
	close(work)
	wg.Wait()
	return got
}

func nanotime() int64 { return time.Now().UnixNano() }
