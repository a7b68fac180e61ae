package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// tree writes a commit's tree into a directory and keeps what the index
// records of it.
type tree struct {
	st                 *filesystem.Storage
	maxBytes, maxFiles int64

	root         *os.Root
	entries      int64
	files, bytes int64
	skipped      []string
	index        []*index.Entry
}

// checkout writes the tree of commit head into dir.
func (w *tree) checkout(ctx context.Context, dir string, head plumbing.Hash) error {
	c, err := object.GetCommit(w.st, head)
	if err != nil {
		return err
	}
	t, err := object.GetTree(w.st, c.TreeHash)
	if err != nil {
		return err
	}
	if w.root, err = os.OpenRoot(dir); err != nil {
		return err
	}
	defer w.root.Close()
	return w.dir(ctx, "", t)
}

// dir writes the entries of t under the directory at p ("" the root).
func (w *tree) dir(ctx context.Context, p string, t *object.Tree) error {
	seen := make(map[string]bool, len(t.Entries))
	for _, e := range t.Entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !safeName(e.Name) {
			return fmt.Errorf("%w: the tree names %q under %q", ErrRefused, e.Name, "/"+p)
		}
		if seen[e.Name] { // git's fsck: duplicateEntries
			return fmt.Errorf("%w: the tree names %q twice under %q", ErrRefused, e.Name, "/"+p)
		}
		seen[e.Name] = true
		if w.entries++; w.entries > w.maxFiles {
			return fmt.Errorf("%w: more than %d entries", ErrTooLarge, w.maxFiles)
		}
		name := path.Join(p, e.Name)
		switch e.Mode {
		case filemode.Dir:
			sub, err := object.GetTree(w.st, e.Hash)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if err := w.mkdir(name); err != nil {
				return err
			}
			if err := w.dir(ctx, name, sub); err != nil {
				return err
			}
		case filemode.Regular, filemode.Deprecated, filemode.Executable:
			if err := w.file(name, e); err != nil {
				return err
			}
		case filemode.Symlink:
			w.skipped = append(w.skipped, name)
			w.index = append(w.index, &index.Entry{Name: name, Mode: e.Mode, Hash: e.Hash})
		case filemode.Submodule:
			if err := w.mkdir(name); err != nil {
				return err
			}
			w.skipped = append(w.skipped, name)
			w.index = append(w.index, &index.Entry{Name: name, Mode: e.Mode, Hash: e.Hash})
		default:
			return fmt.Errorf("%w: %s has mode %o", ErrRefused, name, uint32(e.Mode))
		}
	}
	return nil
}

// safeName reports whether a tree entry's name is one path element that
// names neither the directory, its parent nor a repository's metadata.
// Git refuses the same at checkout (verify_path); go-git's tree decoder
// refuses only the empty name.
func safeName(n string) bool {
	return n != "" && n != "." && n != ".." && !strings.ContainsAny(n, "/\x00") && !strings.EqualFold(n, ".git")
}

// mkdir makes the directory p, which must not exist.
func (w *tree) mkdir(p string) error {
	err := w.root.Mkdir(p, 0o755)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: the tree names %s twice", ErrRefused, p)
	}
	return err
}

// file writes the blob of e as the new regular file p.
func (w *tree) file(p string, e object.TreeEntry) error {
	b, err := object.GetBlob(w.st, e.Hash)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if b.Size > w.maxBytes-w.bytes {
		return fmt.Errorf("%w: more than %d bytes of files", ErrTooLarge, w.maxBytes)
	}
	perm := os.FileMode(0o644)
	if e.Mode == filemode.Executable {
		perm = 0o755
	}
	// O_EXCL: never through what is there, a link included (Clone makes
	// none, and os.Root would not follow one out of the directory).
	f, err := w.root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: the tree names %s twice", ErrRefused, p)
	}
	if err != nil {
		return err
	}
	err = w.copy(f, b)
	fi, statErr := f.Stat()
	if closeErr := f.Close(); err == nil {
		err = errors.Join(statErr, closeErr)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	w.files++
	w.bytes += b.Size
	w.index = append(w.index, &index.Entry{Name: p, Mode: e.Mode, Hash: e.Hash, Size: uint32(b.Size), ModifiedAt: fi.ModTime(), CreatedAt: fi.ModTime()})
	return nil
}

// copy writes b's content, exactly its size, to f.
func (w *tree) copy(f *os.File, b *object.Blob) error {
	r, err := b.Reader()
	if err != nil {
		return err
	}
	defer r.Close()
	n, err := io.Copy(f, io.LimitReader(r, b.Size))
	if err == nil && n != b.Size {
		err = fmt.Errorf("the blob has %d of its %d bytes", n, b.Size)
	}
	return err
}

// describe writes what makes .git a clone: HEAD and the branch, origin's
// URL and branch, the shallow boundary and the index of the files
// written.
func describe(st *filesystem.Storage, rawURL string, head plumbing.Hash, branch plumbing.ReferenceName, shallow bool, entries []*index.Entry) error {
	cfg := config.NewConfig()
	origin := &config.RemoteConfig{Name: "origin", URLs: []string{rawURL}}
	refs := []*plumbing.Reference{plumbing.NewHashReference(plumbing.HEAD, head)}
	if branch != "" {
		short := branch.Short()
		tracking := plumbing.NewRemoteReferenceName("origin", short)
		origin.Fetch = []config.RefSpec{config.RefSpec("+" + branch.String() + ":" + tracking.String())}
		cfg.Branches[short] = &config.Branch{Name: short, Remote: "origin", Merge: branch}
		refs = []*plumbing.Reference{
			plumbing.NewHashReference(branch, head),
			plumbing.NewSymbolicReference(plumbing.HEAD, branch),
			plumbing.NewHashReference(tracking, head),
			plumbing.NewSymbolicReference(plumbing.NewRemoteHEADReferenceName("origin"), tracking),
		}
	}
	cfg.Remotes["origin"] = origin
	if err := st.SetConfig(cfg); err != nil {
		return fmt.Errorf("write .git/config: %w", err)
	}
	for _, r := range refs {
		if err := st.SetReference(r); err != nil {
			return fmt.Errorf("write %s: %w", r.Name(), err)
		}
	}
	if shallow {
		if err := st.SetShallow([]plumbing.Hash{head}); err != nil {
			return fmt.Errorf("write .git/shallow: %w", err)
		}
	}
	slices.SortFunc(entries, func(a, b *index.Entry) int { return strings.Compare(a.Name, b.Name) })
	if err := st.SetIndex(&index.Index{Version: 2, Entries: entries}); err != nil {
		return fmt.Errorf("write .git/index: %w", err)
	}
	return nil
}
