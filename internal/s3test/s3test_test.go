package s3test_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/cosmicac/cosmicac/internal/s3test"
)

// put stores data at bucket/key with the server's own client.
func put(t *testing.T, s *s3test.Server, bucket, key string, data []byte) {
	t.Helper()
	_, err := s.Client(t).PutObject(context.Background(), bucket, key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		t.Fatalf("put %s/%s: %v", bucket, key, err)
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// onDisk fails the test unless Dir/bucket/key holds exactly want.
func onDisk(t *testing.T, s *s3test.Server, bucket, key string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(s.Dir, bucket, filepath.FromSlash(key)))
	if err != nil {
		t.Fatalf("the object as a file: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s/%s on disk: %d bytes, not the %d put", bucket, key, len(got), len(want))
	}
}

// refused fails the test unless err is the server's refusal of a request's
// credentials: 403 with one of the codes given.
func refused(t *testing.T, what string, err error, codes ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted", what)
	}
	resp := minio.ToErrorResponse(err)
	if resp.StatusCode == http.StatusForbidden && slices.Contains(codes, resp.Code) {
		return
	}
	// An access key it does not know, versitygw 1.8.0 answers with 404
	// XAdminUserNotFound (its admin API's error) where S3 answers 403
	// InvalidAccessKeyId: a refusal still.
	if resp.StatusCode == http.StatusNotFound && resp.Code == "XAdminUserNotFound" && slices.Contains(codes, minio.InvalidAccessKeyID) {
		return
	}
	t.Errorf("%s: %v (status %d, code %s); want a 403 refusal (%s)", what, err, resp.StatusCode, resp.Code, strings.Join(codes, ", "))
}

func TestPutObjectIsAPlainFileOnDisk(t *testing.T) {
	s := s3test.Start(t)
	s.MakeBucket(t, "data")
	if st, err := os.Stat(filepath.Join(s.Dir, "data")); err != nil || !st.IsDir() {
		t.Fatalf("the bucket as a directory: %v", err)
	}
	want := randomBytes(3<<20 + 7) // more than one 1 MiB I/O buffer
	const key = "jobs/j-1/out.bin"
	put(t, s, "data", key, want)

	obj, err := s.Client(t).GetObject(context.Background(), "data", key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	got, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("got back %d bytes, not the %d put", len(got), len(want))
	}
	onDisk(t, s, "data", key, want)

	var names []string
	for o := range s.Client(t).ListObjects(context.Background(), "data", minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		names = append(names, o.Key)
	}
	if len(names) != 1 || names[0] != key {
		t.Errorf("listed %q; want [%s]", names, key)
	}
}

func TestWrongSecretIsRefused(t *testing.T) {
	s := s3test.Start(t)
	s.MakeBucket(t, "data")
	put(t, s, "data", "kept", []byte("the right key put this"))
	// Another last character: the secret is wrong by one byte.
	wrong := s.SecretKey[:len(s.SecretKey)-1] + "A"
	if wrong == s.SecretKey {
		wrong = s.SecretKey[:len(s.SecretKey)-1] + "B"
	}
	for _, tc := range []struct {
		name, access, secret string
		codes                []string
	}{
		// The signature does not match: SignatureDoesNotMatch, as S3 says.
		{"wrong secret", s.AccessKey, wrong, []string{minio.SignatureDoesNotMatch, minio.AccessDenied}},
		// An access key it does not know (see refused).
		{"unknown access key", "AKIAUNKNOWNUNKNOWN00", s.SecretKey, []string{minio.InvalidAccessKeyID, minio.AccessDenied}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := s3test.NewClient(s.Endpoint, s.Region, tc.access, tc.secret)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			_, err = c.ListBuckets(ctx)
			refused(t, "list buckets", err, tc.codes...)
			_, err = c.PutObject(ctx, "data", "intruder", strings.NewReader("x"), 1, minio.PutObjectOptions{})
			refused(t, "put", err, tc.codes...)
			if _, err := os.Stat(filepath.Join(s.Dir, "data", "intruder")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused put left a file: %v", err)
			}
			obj, err := c.GetObject(ctx, "data", "kept", minio.GetObjectOptions{})
			if err == nil {
				_, err = io.ReadAll(obj)
				obj.Close()
			}
			refused(t, "get", err, tc.codes...)
		})
	}
}

func TestAnonymousGetIsRefused(t *testing.T) {
	s := s3test.Start(t)
	s.MakeBucket(t, "data")
	secret := []byte("not for anonymous eyes")
	put(t, s, "data", "secret.txt", secret)
	for _, path := range []string{"/data/secret.txt", "/data", "/"} {
		resp, err := http.Get(s.Endpoint + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("anonymous GET %s: %s; want 403", path, resp.Status)
		}
		if bytes.Contains(body, secret) {
			t.Errorf("anonymous GET %s answered the object", path)
		}
	}
}

func TestPresignedGetWorksWithPlainHTTP(t *testing.T) {
	s := s3test.Start(t)
	s.MakeBucket(t, "data")
	want := randomBytes(64 << 10)
	put(t, s, "data", "models/m.gguf", want)
	u, err := s.Client(t).PresignedGetObject(context.Background(), "data", "models/m.gguf", 5*time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(u.String())
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("presigned GET: %s: %s", resp.Status, got)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("presigned GET: %d bytes, not the %d put", len(got), len(want))
	}

	// The signature covers the path: the same query on another key is
	// refused.
	other := *u
	other.Path = "/data/models/other.gguf"
	put(t, s, "data", "models/other.gguf", []byte("another object"))
	resp, err = http.Get(other.String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a presigned GET moved to another key: %s; want 403", resp.Status)
	}
}

func TestPresignedPutWorksWithPlainHTTP(t *testing.T) {
	s := s3test.Start(t)
	s.MakeBucket(t, "data")
	want := randomBytes(200<<10 + 1)
	const key = "uploads/u-1/data.tar"
	u, err := s.Client(t).PresignedPutObject(context.Background(), "data", key, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPut, u.String(), bytes.NewReader(want))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("presigned PUT: %s: %s", resp.Status, body)
	}
	onDisk(t, s, "data", key, want)
	info, err := s.Client(t).StatObject(context.Background(), "data", key, minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(len(want)) {
		t.Errorf("stat after a presigned PUT: size %d; want %d", info.Size, len(want))
	}
}
