package datasync_test

import (
	"archive/zip"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/cosmicac/cosmicac/internal/datasync"
	"github.com/cosmicac/cosmicac/internal/datasync/presign"
	"github.com/cosmicac/cosmicac/internal/s3test"
	"github.com/cosmicac/cosmicac/internal/testenv"
)

// archiveVolume is an archive volume at key of bucket.
func archiveVolume(s *s3test.Server, bucket, key string, put bool) presign.Volume {
	v := volume(s, bucket, key, put, false)
	v.Archive = true
	return v
}

// tree reads every regular file under dir: relative path → content.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestArchiveVolumes: an archive volume's one object, made by the real
// tar, bzip2 and zip, is unpacked into the volume in each format; what
// the job has then is packed back into one object the real tools unpack
// to the same files; tar.bz2 is read only.
func TestArchiveVolumes(t *testing.T) {
	testenv.RequireCommands(t, "apt-get install tar bzip2 zip", "tar", "bzip2", "zip")
	srv := s3test.Start(t)
	srv.MakeBucket(t, "data")
	c := srv.Client(t)
	src := t.TempDir()
	want := map[string]string{"a.txt": "alpha\n", "sub/b.txt": "beta\n", "sub/deeper/c.bin": strings.Repeat("c", 70_000)}
	for k, v := range want {
		p := filepath.Join(src, filepath.FromSlash(k))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	made := t.TempDir()
	run := func(dir, name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v: %s", name, args, err, out)
		}
	}
	run(src, "tar", "-cf", filepath.Join(made, "d.tar"), ".")
	run(src, "tar", "-czf", filepath.Join(made, "d.tar.gz"), ".")
	run(src, "tar", "-cjf", filepath.Join(made, "d.tar.bz2"), ".")
	run(src, "zip", "-qr", filepath.Join(made, "d.zip"), ".")
	ctx := context.Background()
	for _, format := range []string{"tar", "tar.gz", "tar.bz2", "zip"} {
		t.Run(format, func(t *testing.T) {
			key := "archives/d." + format
			if _, err := c.FPutObject(ctx, "data", key, filepath.Join(made, "d."+format), minio.PutObjectOptions{}); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "vol")
			st, err := datasync.PullArchive(ctx, signer{archiveVolume(srv, "data", key, false)}, dir, format, datasync.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := tree(t, dir); !mapsEqual(got, want) || st.Objects != 3 {
				t.Fatalf("unpacked %d files: %v", st.Objects, keysOf(got))
			}
			if format == "tar.bz2" {
				if _, err := datasync.PushArchive(ctx, signer{archiveVolume(srv, "data", key, true)}, dir, format, datasync.Options{}); err == nil {
					t.Fatal("a push of a tar.bz2 archive succeeded")
				}
				return
			}
			// The job writes; the push replaces the object.
			os.WriteFile(filepath.Join(dir, "sub", "new.txt"), []byte("new\n"), 0o644)
			os.Remove(filepath.Join(dir, "a.txt"))
			os.Symlink("/etc/passwd", filepath.Join(dir, "link"))
			st, err = datasync.PushArchive(ctx, signer{archiveVolume(srv, "data", key, true)}, dir, format, datasync.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if st.Objects != 3 || !slices.Equal(st.Skipped, []string{"link"}) {
				t.Fatalf("pushed %+v, want 3 files and the link skipped", st)
			}
			back := filepath.Join(t.TempDir(), "back")
			os.MkdirAll(back, 0o755)
			if err := c.FGetObject(ctx, "data", key, filepath.Join(back, "x."+format), minio.GetObjectOptions{}); err != nil {
				t.Fatal(err)
			}
			if format == "zip" {
				run(back, "unzip", "-q", "x.zip")
			} else {
				run(back, "tar", "-xf", "x."+format)
			}
			os.Remove(filepath.Join(back, "x."+format))
			w := map[string]string{"sub/b.txt": want["sub/b.txt"], "sub/deeper/c.bin": want["sub/deeper/c.bin"], "sub/new.txt": "new\n"}
			if got := tree(t, back); !mapsEqual(got, w) {
				t.Fatalf("the pushed archive unpacked by the real tool: %v", keysOf(got))
			}
		})
	}
}

// TestArchiveNeverEscapes: entries named to leave the volume ("../x",
// "/abs"), links and devices are skipped and named; nothing is written
// outside the volume.
func TestArchiveNeverEscapes(t *testing.T) {
	srv := s3test.Start(t)
	srv.MakeBucket(t, "data")
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, name := range []string{"ok.txt", "../escaped.txt", "/abs.txt", "a/../../escaped2.txt", "d/./e.txt"} {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(name))
	}
	h := &zip.FileHeader{Name: "link"}
	h.SetMode(os.ModeSymlink | 0o777)
	w, _ := zw.CreateHeader(h)
	w.Write([]byte("/etc/passwd"))
	zw.Close()
	if _, err := srv.Client(t).PutObject(context.Background(), "data", "evil.zip", bytes.NewReader(b.Bytes()), int64(b.Len()), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	dir := filepath.Join(parent, "vol")
	st, err := datasync.PullArchive(context.Background(), signer{archiveVolume(srv, "data", "evil.zip", false)}, dir, "zip", datasync.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := tree(t, parent); !mapsEqual(got, map[string]string{"vol/ok.txt": "ok.txt"}) {
		t.Errorf("files under the volume's parent: %v, want ok.txt alone", keysOf(got))
	}
	for _, skipped := range []string{"../escaped.txt", "/abs.txt", "a/../../escaped2.txt", "d/./e.txt", "link"} {
		if !slices.Contains(st.Skipped, skipped) {
			t.Errorf("%q is not named as skipped: %v", skipped, st.Skipped)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
