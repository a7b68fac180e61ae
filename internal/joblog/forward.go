package joblog

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/backoff"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// Append is wrk-monitor's fabric method (this package is its contract,
// shared by the monitor, the workers and the agents) that takes a batch of
// records (AppendParams) and acknowledges it (AppendReply). An
// acknowledged batch is in the monitor's buffer, and, when Loki is
// configured, on its disk.
var Append = fabric.Method[AppendParams, AppendReply]{Name: "monitor.append"}

// AppendParams is the request of Append.
type AppendParams struct {
	Records []Record `json:"records"`
}

// AppendReply acknowledges a batch.
type AppendReply struct {
	Accepted int `json:"accepted"`
	// LastSeq is the monitor's sequence number of the batch's last record.
	LastSeq uint64 `json:"lastSeq"`
	// Refused counts the records dropped, not retried: those the caller
	// may not write (another job's, or a job not on its rack), and those
	// over their job's share of the monitor's spool (the monitor notes
	// these in the job's log).
	Refused int `json:"refused,omitempty"`
}

// Caller sends one fabric call; *fabric.Node implements it.
type Caller interface {
	Call(ctx context.Context, key fabric.PublicKey, method string, params, result any) error
}

// NodeFunc is a Caller through whatever node f returns at the time of the
// call (a worker whose node is replaced, e.g. simcluster.Endpoint.Node);
// while f returns nil, calls fail and the forwarder buffers.
type NodeFunc func() *fabric.Node

// Call implements Caller.
func (f NodeFunc) Call(ctx context.Context, key fabric.PublicKey, method string, params, result any) error {
	n := f()
	if n == nil {
		return fabric.Errorf(fabric.CodeUnavailable, "no fabric node")
	}
	return n.Call(ctx, key, method, params, result)
}

// ForwarderStats counts a forwarder's records.
type ForwarderStats struct {
	Emitted  uint64 // given to Emit
	Sent     uint64 // acknowledged by the monitor
	Dropped  uint64 // refused by Emit because the buffer was full
	Buffered int    // waiting to be sent now
	Failures uint64 // failed calls to the monitor
}

// Forwarder is the Sink of a producer (a worker, an agent): it batches
// records to wrk-monitor over the fabric. Emit never blocks: records wait
// in a buffer of at most maxBuffered while the monitor is away, and a
// record that finds the buffer full is dropped and counted. Once the
// monitor answers again, each job that lost records gets a system record
// (step "log_dropped") saying how many, so a reader of the job's logs sees
// the hole. Run does the sending.
type Forwarder struct {
	node    Caller
	monitor fabric.PublicKey
	max     int

	// MaxBatch bounds the records of one call (default 1000); CallTimeout
	// bounds one call (default 10s); MinBackoff and MaxBackoff bound the
	// wait after a failed call (default 100ms and 5s). Set before Run.
	MaxBatch    int
	CallTimeout time.Duration
	MinBackoff  time.Duration
	MaxBackoff  time.Duration

	mu       sync.Mutex
	buf      []Record
	dropped  map[string]int // job -> records dropped since last reported
	droppedT map[string]string
	stats    ForwarderStats
	wake     chan struct{}
	idle     *sync.Cond // broadcast when buf drains
}

// NewForwarder returns a forwarder of records to the monitor with key
// monitor, buffering at most maxBuffered (default 10000 when <= 0).
func NewForwarder(node Caller, monitor fabric.PublicKey, maxBuffered int) *Forwarder {
	if maxBuffered <= 0 {
		maxBuffered = 10000
	}
	f := &Forwarder{
		node: node, monitor: monitor, max: maxBuffered,
		MaxBatch: 1000, CallTimeout: 10 * time.Second,
		MinBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second,
		dropped: map[string]int{}, droppedT: map[string]string{},
		wake: make(chan struct{}, 1),
	}
	f.idle = sync.NewCond(&f.mu)
	return f
}

// Emit implements Sink. It never blocks.
func (f *Forwarder) Emit(r Record) {
	f.mu.Lock()
	f.stats.Emitted++
	if len(f.buf) >= f.max {
		f.stats.Dropped++
		f.dropped[r.JobID]++
		if r.Team != "" {
			f.droppedT[r.JobID] = r.Team
		}
		f.mu.Unlock()
		return
	}
	f.buf = append(f.buf, r)
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Stats returns the forwarder's counts.
func (f *Forwarder) Stats() ForwarderStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	s.Buffered = len(f.buf)
	return s
}

// Run sends buffered records until ctx ends, then tries once more, for at
// most CallTimeout, to send what is left.
func (f *Forwarder) Run(ctx context.Context) error {
	retry := backoff.Backoff{Min: f.MinBackoff, Max: f.MaxBackoff}
	for {
		sent, err := f.sendOnce(ctx)
		switch {
		case err != nil:
			if !retry.Wait(ctx) {
				f.drainOnce()
				return nil
			}
			continue
		case sent > 0:
			retry.Reset()
			continue // more may be waiting
		}
		select {
		case <-ctx.Done():
			f.drainOnce()
			return nil
		case <-f.wake:
		}
	}
}

func (f *Forwarder) drainOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), f.CallTimeout)
	defer cancel()
	for {
		n, err := f.sendOnce(ctx)
		if err != nil || n == 0 {
			return
		}
	}
}

// Flush waits until the buffer is empty (every emitted record acknowledged
// or dropped) or ctx ends. Run must be running.
func (f *Forwarder) Flush(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		f.mu.Lock()
		f.idle.Broadcast()
		f.mu.Unlock()
	})
	defer stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.buf) > 0 || len(f.dropped) > 0 {
		if ctx.Err() != nil {
			return fmt.Errorf("flush log records: %w", ctx.Err())
		}
		f.idle.Wait()
	}
	return nil
}

// sendOnce sends one batch, reporting how many records the monitor took.
func (f *Forwarder) sendOnce(ctx context.Context) (int, error) {
	f.mu.Lock()
	n := min(len(f.buf), f.MaxBatch)
	batch := make([]Record, 0, n+len(f.dropped))
	// Drop notices go first: they explain the hole before the records
	// that follow it.
	notices := len(f.dropped)
	counts := make([]int, 0, notices)
	for job, k := range f.dropped {
		counts = append(counts, k)
		batch = append(batch, Record{
			Time: time.Now(), JobID: job, Team: f.droppedT[job], Source: SourceSystem, Stream: "log-forwarder",
			Step: StepLogDropped, OK: Bool(false),
			Line: fmt.Sprintf("%d log records dropped: the monitor was unreachable and the buffer (%d records) was full", k, f.max),
		})
	}
	batch = append(batch, f.buf[:n]...)
	f.mu.Unlock()
	if len(batch) == 0 {
		return 0, nil
	}
	cctx, cancel := context.WithTimeout(ctx, f.CallTimeout)
	_, err := Append.Call(cctx, f.node, f.monitor, AppendParams{Records: batch})
	cancel()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.stats.Failures++
		return 0, fmt.Errorf("send log records: %w", err)
	}
	// Records emitted (and dropped) meanwhile stay: remove only what was sent.
	for i, r := range batch[:notices] {
		if f.dropped[r.JobID] -= counts[i]; f.dropped[r.JobID] <= 0 {
			delete(f.dropped, r.JobID)
			delete(f.droppedT, r.JobID)
		}
	}
	f.buf = append(f.buf[:0], f.buf[n:]...)
	f.stats.Sent += uint64(n)
	if len(f.buf) == 0 && len(f.dropped) == 0 {
		f.idle.Broadcast()
	}
	return len(batch), nil
}
