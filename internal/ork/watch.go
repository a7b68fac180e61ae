package ork

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/store"
)

// The jobs' version, for watches (watchJobs, long-polled by the app-node's
// ?watch=): every transaction the ork commits bumps it, so a watcher learns
// that something may have changed without the ork knowing what each
// watcher looks at; the watcher then reads what it shows again. Commits
// that write no job (a rack's nodes, say) wake no one.

// changeFeed is a version and a channel closed on every bump. Its lock is
// its own: bumps happen with the ork's lock held.
type changeFeed struct {
	mu      sync.Mutex
	epoch   string // this process's; a new ork is a new epoch
	version uint64
	changed chan struct{}
}

func newChangeFeed() *changeFeed {
	b := make([]byte, 8)
	rand.Read(b)
	return &changeFeed{epoch: hex.EncodeToString(b), changed: make(chan struct{})}
}

func (f *changeFeed) bump() {
	f.mu.Lock()
	f.version++
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

// wait returns the version once it is past since (or of another epoch), or
// when d has passed, or ctx ended.
func (f *changeFeed) wait(ctx context.Context, epoch string, since uint64, d time.Duration) (orkapi.JobsVersion, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		f.mu.Lock()
		v, ch := orkapi.JobsVersion{Epoch: f.epoch, Version: f.version}, f.changed
		f.mu.Unlock()
		if epoch != v.Epoch || since < v.Version || d <= 0 {
			return v, nil
		}
		select {
		case <-ch:
		case <-timer.C:
			d = 0
		case <-ctx.Done():
			return orkapi.JobsVersion{}, ctx.Err()
		}
	}
}

// feedStore bumps the feed after every committed transaction that wrote a
// job (created, replaced or deleted it): the heartbeat's writes of racks
// and nodes wake no watcher.
type feedStore struct {
	Store
	feed *changeFeed
}

func (s feedStore) Update(ctx context.Context, fn func(tx store.Tx) error) error {
	var wrote bool
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		wrote = false // a retried transaction starts again
		return fn(jobWrites{Tx: tx, wrote: &wrote})
	})
	if err == nil && wrote {
		s.feed.bump()
	}
	return err
}

// jobWrites is a transaction that notes whether it wrote a job.
type jobWrites struct {
	store.Tx
	wrote *bool
}

func (t jobWrites) CreateJob(ctx context.Context, j cosmic.Job) error {
	*t.wrote = true
	return t.Tx.CreateJob(ctx, j)
}

func (t jobWrites) PutJob(ctx context.Context, j cosmic.Job) error {
	*t.wrote = true
	return t.Tx.PutJob(ctx, j)
}

func (t jobWrites) DeleteJob(ctx context.Context, id string) error {
	*t.wrote = true
	return t.Tx.DeleteJob(ctx, id)
}

// WatchJobs is orkapi.MethodWatchJobs: the jobs' version once it differs
// from p's (another epoch, or past Since), or when the wait (at most
// orkapi.MaxWatchJobsWait) ends.
func (o *Ork) WatchJobs(ctx context.Context, p orkapi.WatchJobsParams) (orkapi.JobsVersion, error) {
	wait := min(time.Duration(p.WaitMillis)*time.Millisecond, orkapi.MaxWatchJobsWait)
	return o.feed.wait(ctx, p.Epoch, p.Since, wait)
}

// applies counts each job's Applies in flight to its workers, so that a
// kill waits for them: a kill releases the job's GPUs at once, and an
// Apply still on its way would reach the worker after the kill's Stop and
// claim the GPUs the next job is given (the worker refuses that job's
// Apply then: vmi_unschedulable).
type applies struct {
	mu sync.Mutex
	n  map[string]*flight
}

// flight is the Applies of one job in flight; done closes when the last
// returns.
type flight struct {
	n    int
	done chan struct{}
}

// start counts an Apply of job; call the returned func when it returned.
func (a *applies) start(job string) func() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == nil {
		a.n = map[string]*flight{}
	}
	f := a.n[job]
	if f == nil {
		f = &flight{done: make(chan struct{})}
		a.n[job] = f
	}
	f.n++
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			if f.n--; f.n == 0 {
				close(f.done)
				delete(a.n, job)
			}
		})
	}
}

// wait returns once no Apply of job counted before the call is in flight.
func (a *applies) wait(job string) {
	a.mu.Lock()
	f := a.n[job]
	a.mu.Unlock()
	if f != nil {
		<-f.done
	}
}
