package gitsync_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/datasync/gitsync"
	"github.com/cosmicac/cosmicac/internal/gittest"
)

// BenchmarkClone: a repository of 1,000 small files (100 directories of
// 10, 1 KiB each) over loopback from git-http-backend, by Clone and, the
// baseline, by git's own `git clone --depth 1 --single-branch --no-tags`.
// Both do the same work: fetch the pack, write it to .git with its index,
// check out the files, write .git/index.
func BenchmarkClone(b *testing.B) {
	const dirs, perDir = 100, 10
	files := map[string]string{}
	for d := range dirs {
		for f := range perDir {
			files[fmt.Sprintf("d%03d/f%02d.txt", d, f)] = strings.Repeat(fmt.Sprintf("%d/%d ", d, f), 1024)[:1024]
		}
	}
	s := gittest.Start(b, map[string]gittest.Repo{"bench": {Files: files}})
	url := s.RepoURL("bench")

	b.Run("gitsync", func(b *testing.B) {
		base := b.TempDir()
		i := 0
		for b.Loop() {
			i++
			st, err := gitsync.Clone(context.Background(), url, filepath.Join(base, strconv.Itoa(i)), gitsync.Options{})
			if err != nil || st.Files != int64(len(files)) {
				b.Fatalf("Clone: %+v, %v", st.Files, err)
			}
		}
		b.ReportMetric(float64(len(files)*b.N)/b.Elapsed().Seconds(), "files/s")
	})
	b.Run("git-cli", func(b *testing.B) {
		base := b.TempDir()
		i := 0
		for b.Loop() {
			i++
			s.Git("", "clone", "-q", "--depth", "1", "--single-branch", "--no-tags", url, filepath.Join(base, strconv.Itoa(i)))
		}
		b.ReportMetric(float64(len(files)*b.N)/b.Elapsed().Seconds(), "files/s")
	})
}
