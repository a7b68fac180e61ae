package datasync

import (
	"archive/tar"
	"archive/zip"
	"compress/bzip2"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// The archive formats a volume's data may be kept in (dataStore.archive):
// one object, unpacked into the volume and packed back.
const (
	ArchiveZip   = "zip"
	ArchiveTar   = "tar"
	ArchiveTarGz = "tar.gz"
	ArchiveTarBz = "tar.bz2" // read only: the standard library writes no bzip2
)

// ArchiveKey is the one key of an archive volume's requests: the object
// at the volume's prefix itself.
const ArchiveKey = "."

// Bounds of an unpacked archive.
const (
	MaxArchiveEntries = 1_000_000
	MaxArchiveBytes   = 1 << 40 // 1 TiB unpacked
)

// MaxArchivePush bounds a packed archive: it goes back in one PUT, whose
// bound in S3 is 5 GiB.
const MaxArchivePush = 5 << 30

// ErrArchive is an archive that cannot be unpacked: corrupt, of another
// format, or past the bounds.
var ErrArchive = errors.New("the archive cannot be unpacked")

// PullArchive downloads the volume's archive (the object at its prefix)
// and unpacks it into dir (made if absent), through an os.Root: an entry
// whose name leaves the directory, a link, a device, or anything but a
// regular file or a directory is skipped and named. The download goes to
// a temporary file beside dir first (zip reads from the end).
func PullArchive(ctx context.Context, s Signer, dir, format string, opt Options) (Stats, error) {
	switch format {
	case ArchiveZip, ArchiveTar, ArchiveTarGz, ArchiveTarBz:
	default:
		return Stats{}, fmt.Errorf("archive format %q: want zip, tar, tar.gz or tar.bz2", format)
	}
	hc := client(opt)
	reqs, err := s.Sign(ctx, OpGet, []string{ArchiveKey}, "")
	if err != nil {
		return Stats{}, err
	}
	if len(reqs) != 1 {
		return Stats{}, fmt.Errorf("get the archive: %d signed requests, want 1", len(reqs))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Stats{}, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(filepath.Clean(dir)), partPrefix+"archive-")
	if err != nil {
		return Stats{}, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	var size int64
	err = do(ctx, hc, reqs[0], nil, -1, func(r io.Reader) error {
		size, err = io.Copy(tmp, r)
		return err
	})
	if errors.Is(err, errNotFound) {
		return Stats{}, fmt.Errorf("%w: no archive object at the volume's prefix", ErrNoContainer)
	}
	if err != nil {
		return Stats{}, fmt.Errorf("get the archive: %w", err)
	}
	if opt.Progress != nil {
		opt.Progress(Stats{ListedObjects: 1, ListedBytes: size})
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Stats{}, err
	}
	defer root.Close()
	st := Stats{ListedObjects: 1, ListedBytes: size}
	u := unpacker{root: root, st: &st}
	switch format {
	case ArchiveZip:
		zr, err := zip.NewReader(tmp, size)
		if err != nil {
			return Stats{}, fmt.Errorf("%w: %v", ErrArchive, err)
		}
		for _, f := range zr.File {
			if err := ctx.Err(); err != nil {
				return st, err
			}
			if err := u.zipEntry(f); err != nil {
				return st, err
			}
		}
	default:
		if _, err := tmp.Seek(0, io.SeekStart); err != nil {
			return Stats{}, err
		}
		var r io.Reader = tmp
		switch format {
		case ArchiveTarGz:
			gz, err := gzip.NewReader(tmp)
			if err != nil {
				return Stats{}, fmt.Errorf("%w: %v", ErrArchive, err)
			}
			defer gz.Close()
			r = gz
		case ArchiveTarBz:
			r = bzip2.NewReader(tmp)
		}
		tr := tar.NewReader(r)
		for {
			if err := ctx.Err(); err != nil {
				return st, err
			}
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return st, fmt.Errorf("%w: %v", ErrArchive, err)
			}
			if err := u.entry(h.Name, h.Typeflag == tar.TypeDir, h.Typeflag == tar.TypeReg, fs.FileMode(h.Mode), tr); err != nil {
				return st, err
			}
		}
	}
	return st, nil
}

// unpacker writes an archive's entries under root.
type unpacker struct {
	root    *os.Root
	st      *Stats
	entries int
}

func (u *unpacker) zipEntry(f *zip.File) error {
	mode := f.Mode()
	if mode.IsDir() {
		return u.entry(f.Name, true, false, mode, nil)
	}
	if !mode.IsRegular() {
		return u.entry(f.Name, false, false, mode, nil)
	}
	rc, err := f.Open()
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrArchive, f.Name, err)
	}
	defer rc.Close()
	return u.entry(f.Name, false, true, mode, rc)
}

// entry writes one entry: a directory, a regular file from r, or nothing
// (anything else, or a name that is no path inside the volume: named in
// Skipped).
func (u *unpacker) entry(name string, dir, regular bool, mode fs.FileMode, r io.Reader) error {
	u.entries++
	if u.entries > MaxArchiveEntries {
		return fmt.Errorf("%w: more than %d entries", ErrArchive, MaxArchiveEntries)
	}
	// "./a/b" and "a/b/" are a/b; ".." anywhere, a leading "/", an
	// empty segment are no path inside the volume.
	k := strings.TrimSuffix(name, "/")
	for strings.HasPrefix(k, "./") {
		k = k[2:]
	}
	if k == "." || k == "" {
		return nil // the archive's root
	}
	if CheckKey(k) != nil {
		u.st.Skipped = addSkipped(u.st.Skipped, name)
		return nil
	}
	if dir {
		return u.root.MkdirAll(filepath.FromSlash(k), 0o755)
	}
	if !regular {
		u.st.Skipped = addSkipped(u.st.Skipped, name)
		return nil
	}
	if d := path.Dir(k); d != "." {
		if err := u.root.MkdirAll(filepath.FromSlash(d), 0o755); err != nil {
			return err
		}
	}
	f, err := u.root.OpenFile(filepath.FromSlash(k), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, mode.Perm()|0o600)
	if err != nil {
		return fmt.Errorf("unpack %s: %w", k, err)
	}
	n, err := io.Copy(f, io.LimitReader(r, MaxArchiveBytes-u.st.Bytes+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("unpack %s: %w", k, err)
	}
	u.st.Bytes += n
	u.st.Objects++
	if u.st.Bytes > MaxArchiveBytes {
		return fmt.Errorf("%w: more than %d bytes unpacked", ErrArchive, int64(MaxArchiveBytes))
	}
	return nil
}

// PushArchive packs dir's regular files and directories (links and
// devices skipped, named; walked through an os.Root, never followed) into
// one archive of format and puts it at the volume's prefix, replacing
// the one there. tar.bz2 is refused: the standard library writes no
// bzip2.
func PushArchive(ctx context.Context, s Signer, dir, format string, opt Options) (Stats, error) {
	if format == ArchiveTarBz {
		return Stats{}, fmt.Errorf("archive format %s is read only: nothing can write bzip2 here", format)
	}
	if format != ArchiveZip && format != ArchiveTar && format != ArchiveTarGz {
		return Stats{}, fmt.Errorf("archive format %q: want zip, tar or tar.gz", format)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Stats{}, err
	}
	defer root.Close()
	tmp, err := os.CreateTemp(filepath.Dir(filepath.Clean(dir)), partPrefix+"archive-")
	if err != nil {
		return Stats{}, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	var st Stats
	if err := pack(ctx, root, tmp, format, &st); err != nil {
		return st, err
	}
	size, err := tmp.Seek(0, io.SeekEnd)
	if err != nil {
		return st, err
	}
	if size > MaxArchivePush {
		return st, fmt.Errorf("the packed archive is %d bytes, more than the %d one PUT takes: keep such data as objects (no archive)", size, int64(MaxArchivePush))
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return st, err
	}
	reqs, err := s.Sign(ctx, OpPut, []string{ArchiveKey}, "")
	if err != nil {
		return st, err
	}
	if len(reqs) != 1 {
		return st, fmt.Errorf("put the archive: %d signed requests, want 1", len(reqs))
	}
	if err := do(ctx, client(opt), reqs[0], tmp, size, nil); err != nil {
		return st, fmt.Errorf("put the archive: %w", err)
	}
	return st, nil
}

// pack writes the archive of root into w.
func pack(ctx context.Context, root *os.Root, w io.Writer, format string, st *Stats) error {
	var add func(name string, fi fs.FileInfo, f *os.File) error
	var finish func() error
	switch format {
	case ArchiveZip:
		zw := zip.NewWriter(w)
		add = func(name string, fi fs.FileInfo, f *os.File) error {
			h, err := zip.FileInfoHeader(fi)
			if err != nil {
				return err
			}
			h.Name, h.Method = name, zip.Deflate
			if fi.IsDir() {
				h.Name += "/"
			}
			zf, err := zw.CreateHeader(h)
			if err != nil || f == nil {
				return err
			}
			_, err = io.Copy(zf, f)
			return err
		}
		finish = zw.Close
	default:
		var gz *gzip.Writer
		out := w
		if format == ArchiveTarGz {
			gz = gzip.NewWriter(w)
			out = gz
		}
		tw := tar.NewWriter(out)
		add = func(name string, fi fs.FileInfo, f *os.File) error {
			h, err := tar.FileInfoHeader(fi, "")
			if err != nil {
				return err
			}
			h.Name, h.Uname, h.Gname, h.Uid, h.Gid = name, "", "", 0, 0
			if fi.IsDir() {
				h.Name += "/"
			}
			if err := tw.WriteHeader(h); err != nil || f == nil {
				return err
			}
			// The size the header says, whatever the job appends meanwhile
			// (a file that shrank fails: the archive would be short).
			_, err = io.CopyN(tw, f, h.Size)
			return err
		}
		finish = func() error {
			if err := tw.Close(); err != nil {
				return err
			}
			if gz != nil {
				return gz.Close()
			}
			return nil
		}
	}
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == "." || strings.HasPrefix(path.Base(p), partPrefix) {
			return nil
		}
		switch {
		case d.IsDir():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			return add(p, fi, nil)
		case d.Type().IsRegular():
			f, err := openRegular(root, p)
			if err != nil {
				st.Skipped = addSkipped(st.Skipped, p)
				return nil
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				return err
			}
			if err := add(p, fi, f); err != nil {
				return err
			}
			st.Objects++
			st.Bytes += fi.Size()
			return nil
		}
		st.Skipped = addSkipped(st.Skipped, p)
		return nil
	})
	if err != nil {
		return err
	}
	return finish()
}
