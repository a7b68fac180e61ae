package gitsync_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/cosmicac/cosmicac/internal/gittest"
)

type hash = plumbing.Hash

// treeEntry is one entry of a tree as forge writes it, byte for byte:
// any mode, any name.
type treeEntry struct {
	mode, name string
	hash       hash
}

// forge writes objects no git client would make into a bare repository of
// a gittest server, with go-git's plumbing: trees are encoded by hand, in
// the order given, with the names given.
type forge struct {
	t    *testing.T
	s    *gittest.Server
	repo string
	st   *filesystem.Storage
}

func (f *forge) storage() *filesystem.Storage {
	if f.st == nil {
		f.st = filesystem.NewStorage(osfs.New(f.s.Path(f.repo)), cache.NewObjectLRUDefault())
		f.t.Cleanup(func() { f.st.Close() })
	}
	return f.st
}

// put stores an object of type typ with content raw.
func (f *forge) put(typ plumbing.ObjectType, raw []byte) hash {
	f.t.Helper()
	o := f.storage().NewEncodedObject()
	o.SetType(typ)
	w, err := o.Writer()
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := w.Write(raw); err != nil {
		f.t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		f.t.Fatal(err)
	}
	h, err := f.storage().SetEncodedObject(o)
	if err != nil {
		f.t.Fatal(err)
	}
	return h
}

func (f *forge) blob(content string) hash { return f.put(plumbing.BlobObject, []byte(content)) }

func (f *forge) file(name, content string) treeEntry {
	return treeEntry{mode: "100644", name: name, hash: f.blob(content)}
}

func (f *forge) exec(name, content string) treeEntry {
	return treeEntry{mode: "100755", name: name, hash: f.blob(content)}
}

func (f *forge) link(name, target string) treeEntry {
	return treeEntry{mode: "120000", name: name, hash: f.blob(target)}
}

func (f *forge) dir(name string, tree hash) treeEntry {
	return treeEntry{mode: "40000", name: name, hash: tree}
}

// tree stores a tree of entries as given: no check, no sorting.
func (f *forge) tree(entries ...treeEntry) hash {
	var raw []byte
	for _, e := range entries {
		raw = fmt.Appendf(raw, "%s %s\x00", e.mode, e.name)
		raw = append(raw, e.hash[:]...)
	}
	return f.put(plumbing.TreeObject, raw)
}

// commit stores a commit of tree and makes it HEAD, on main.
func (f *forge) commit(tree hash) {
	f.t.Helper()
	sig := object.Signature{Name: "forge", Email: "forge@example.invalid", When: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	c := &object.Commit{Author: sig, Committer: sig, Message: "forged\n", TreeHash: tree}
	o := f.storage().NewEncodedObject()
	if err := c.Encode(o); err != nil {
		f.t.Fatal(err)
	}
	h, err := f.storage().SetEncodedObject(o)
	if err != nil {
		f.t.Fatal(err)
	}
	main := plumbing.NewBranchReferenceName("main")
	for _, r := range []*plumbing.Reference{plumbing.NewHashReference(main, h), plumbing.NewSymbolicReference(plumbing.HEAD, main)} {
		if err := f.storage().SetReference(r); err != nil {
			f.t.Fatal(err)
		}
	}
}
