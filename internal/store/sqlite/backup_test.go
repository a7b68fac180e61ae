package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/store/storetest"
)

// TestBackupWhileWriting: a backup taken while jobs are being written holds
// everything written before and, of the jobs being written, a prefix of
// them in commit order (one snapshot); it opens, passes integrity_check,
// and is private. A backup onto an existing file, or of a file that does
// not exist, fails and changes nothing.
func TestBackupWhileWriting(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(filepath.Join(dir, "live.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.Fill(t, s, 10)

	var mu sync.Mutex
	var committed []string
	started := make(chan struct{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			j := cosmic.Job{ID: fmt.Sprintf("w%06d", i), Team: "ml", User: "ana", Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: "w", Location: "us", Image: "ubuntu:24.04"}}
			if err := s.CreateJob(ctx, j); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			committed = append(committed, j.ID)
			if len(committed) == 20 {
				close(started)
			}
			mu.Unlock()
		}
	}()
	<-started
	out := filepath.Join(dir, "backup.db")
	err = Backup(ctx, filepath.Join(dir, "live.db"), out)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("backup file: %v, %v; want mode 0600", fi.Mode(), err)
	}

	b, err := Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.IntegrityCheck(ctx); err != nil {
		t.Fatal(err)
	}
	jobs, _, err := b.ListJobs(ctx, store.ListJobsQuery{Size: store.MaxPageSize})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range jobs {
		if j.ID[0] == 'w' {
			got = append(got, j.ID)
		}
	}
	slices.Sort(got) // IDs in commit order
	mu.Lock()
	all := slices.Clone(committed)
	mu.Unlock()
	if len(got) < 20 || len(got) > len(all) || !slices.Equal(got, all[:len(got)]) {
		t.Errorf("the backup holds %d of the %d jobs written meanwhile; want a prefix of at least 20", len(got), len(all))
	}
	// Everything written before the backup is in it, as it was.
	for _, j := range all[len(got):] {
		if err := s.DeleteJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	storetest.Same(t, s, b)
	storetest.Writable(t, s, b)

	if err := Backup(ctx, filepath.Join(dir, "live.db"), out); err == nil {
		t.Error("a backup onto an existing file succeeded")
	}
	if err := b.IntegrityCheck(ctx); err != nil {
		t.Errorf("the existing file after a refused backup: %v", err)
	}
	missing := filepath.Join(dir, "nope.db")
	if err := Backup(ctx, missing, filepath.Join(dir, "b2.db")); err == nil {
		t.Error("a backup of a missing file succeeded")
	}
	for _, p := range []string{missing, filepath.Join(dir, "b2.db")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists after a failed backup", p)
		}
	}
}
