package monitor_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/monitor"
	"github.com/cosmicac/cosmicac/internal/monitor/lokitest"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

func lokiConfig(t testing.TB, lk *lokitest.Server, dir string) monitor.Config {
	cfg := monitor.DefaultConfig(dir)
	cfg.Loki.URL = lk.URL
	cfg.Loki.MinBackoff = config.Duration(10 * time.Millisecond)
	cfg.Loki.MaxBackoff = config.Duration(200 * time.Millisecond)
	cfg.Loki.BatchWait = config.Duration(5 * time.Millisecond)
	return cfg
}

// waitLoki waits until Loki holds n records of jobA.
func waitLoki(t testing.TB, lk *lokitest.Server, n int) []lokitest.Entry {
	t.Helper()
	var es []lokitest.Entry
	waittest.Until(t, func() bool {
		es = lk.Entries(map[string]string{"job": jobA})
		return len(es) >= n
	}, "Loki to hold %d records of the job", n)
	return es
}

func TestLokiRetries429And500(t *testing.T) {
	for _, format := range []string{"protobuf", "json"} {
		t.Run(format, func(t *testing.T) {
			lk := lokitest.New()
			defer lk.Close()
			lk.Tenant = "tenant-1"
			lk.FailNext(1, 429, "1")
			lk.FailNext(2, 500, "")
			cfg := lokiConfig(t, lk, t.TempDir())
			cfg.Loki.Format, cfg.Loki.TenantID = format, "tenant-1"
			cfg.Loki.Username, cfg.Loki.Password = "u", "p"
			waits := &retryWaits{}
			e := startLogged(t, cfg, false, slog.New(waits))
			ok := true
			r := rec(0)
			r.Source, r.Step, r.OK = joblog.SourceSystem, "import_disk", &ok
			if _, err := e.m.Append(context.Background(), []joblog.Record{r}); err != nil {
				t.Fatal(err)
			}
			appendN(t, e.m, 1, 100, 10)
			es := waitLoki(t, lk, 100)
			if w := waits.get(); len(w) != 3 || w[0] != time.Second {
				t.Errorf("the monitor waited %v before its retries; want 3, the first the 429's Retry-After: 1s", w)
			}
			if _, failed, _ := lk.Stats(); failed != 3 {
				t.Errorf("faults answered: %d, want 3", failed)
			}
			if len(es) != 100 {
				t.Fatalf("Loki holds %d records, want 100", len(es))
			}
			got := es[0]
			want := map[string]string{"job": jobA, "team": "ml", "source": "system", "replica": "0"}
			for k, v := range want {
				if got.Labels[k] != v {
					t.Errorf("label %s=%q, want %q (labels %v)", k, got.Labels[k], v, got.Labels)
				}
			}
			if got.Metadata["step"] != "import_disk" || got.Metadata["ok"] != "true" || got.Metadata["stream"] != "stdout" || got.Line != "line 0" {
				t.Errorf("first entry %+v", got)
			}
			for _, a := range lk.Authorizations() {
				if a != "Basic dTpw" {
					t.Fatalf("Authorization %q, want basic auth", a)
				}
			}
			if n := metric(t, e.m, "cosmicac_monitor_loki_push_errors_total"); n != 3 {
				t.Errorf("push errors metric %v, want 3", n)
			}
		})
	}
}

// Records acknowledged while Loki is away are in Loki once each after a
// restart (a torn frame at the spool's end cut off), on the fake and on a
// real Loki; numbers go on after the highest.
func TestSpoolKeepsAcknowledgedRecordsAcrossRestart(t *testing.T) {
	eachLoki(t, testSpoolKeepsAcknowledgedRecordsAcrossRestart)
}

func testSpoolKeepsAcknowledgedRecordsAcrossRestart(t *testing.T, lk aLoki) {
	dir := t.TempDir()
	cfg := limitsConfig(lk, dir)
	cfg.Loki.SegmentBytes = 8 << 10 // several segments
	cfg.Loki.SpoolBytes = 64 << 20
	away := cfg
	away.Loki.URL = "http://127.0.0.1:1" // Loki is away: nothing listens

	e := start(t, away, false)
	// A producer appends until the monitor goes away under it.
	var mu sync.Mutex
	var acked []int
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i += 10 {
			var rs []joblog.Record
			for k := i; k < i+10; k++ {
				rs = append(rs, rec(k))
			}
			if _, err := e.m.Append(context.Background(), rs); err != nil {
				return
			}
			mu.Lock()
			for k := i; k < i+10; k++ {
				acked = append(acked, k)
			}
			mu.Unlock()
		}
	})
	// The monitor goes away once the producer has filled a few segments.
	waittest.Until(t, func() bool {
		segs, _ := filepath.Glob(filepath.Join(dir, "spool", "*.seg"))
		return len(segs) >= 4
	}, "the spool's fourth segment")
	e.stop()
	wg.Wait()
	if len(acked) == 0 {
		t.Fatal("nothing was acknowledged")
	}
	// A torn frame at the end, as from a crash mid-write, is cut off.
	segs, _ := filepath.Glob(filepath.Join(dir, "spool", "*.seg"))
	f, err := os.OpenFile(segs[len(segs)-1], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0, 0, 1, 0, 9, 9})
	f.Close()

	e2 := start(t, cfg, false)
	waitIn(t, lk, len(acked))
	es := lokiEntries(t, lk)
	seen := map[string]int{}
	var maxTS int64
	for _, x := range es {
		seen[x.Line]++
		maxTS = max(maxTS, x.TS)
	}
	for _, k := range acked {
		if seen["line "+strconv.Itoa(k)] != 1 {
			t.Fatalf("acknowledged record %d is in Loki %d times", k, seen["line "+strconv.Itoa(k)])
		}
	}
	// Numbers go on after the restart.
	rep, err := e2.m.Append(context.Background(), []joblog.Record{rec(-1)})
	if err != nil {
		t.Fatal(err)
	}
	if int64(rep.LastSeq) <= maxTS {
		t.Fatalf("after the restart a record got %d, not above %d", rep.LastSeq, maxTS)
	}
	t.Logf("%d acknowledged records across %d segments, all in Loki once", len(acked), len(segs))
}

// History from Loki, then live records from the monitor, without gap or
// duplicate at the seam, while records arrive during the history read; on
// the fake and on a real Loki.
func TestHistoryAndLiveMeetWithoutGapOrDuplicate(t *testing.T) {
	eachLoki(t, func(t *testing.T, lk aLoki) {
		cfg := limitsConfig(lk, t.TempDir())
		cfg.BufferPerJob, cfg.ViewerMaxLag = 100, 100
		cfg.Loki.QueryLimit = 70 // several pages
		e := start(t, cfg, false)
		appendN(t, e.m, 0, 400, 20)
		waitIn(t, lk, 400)

		// A generous deadline: on a loaded machine the viewer may be cut off for
		// lagging (the buffer holds 100) and resume, each resume honouring the
		// stream's 2 s retry; what is checked is the records, not the time.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var recs []client.LogRecord
		var metas []client.LogEvent
		done := make(chan error, 1)
		go func() {
			done <- e.c.JobLogs(ctx, jobA, client.LogOptions{Follow: true, Since: "1h"}, func(ev client.LogEvent) error {
				switch ev.Type {
				case client.LogRecordEvent:
					recs = append(recs, *ev.Record)
					if len(recs) == 700 {
						return errors.New("done")
					}
				case client.LogMetaEvent:
					metas = append(metas, ev)
				}
				return nil
			})
		}()
		// Live records arrive while history is read.
		for i := 400; i < 700; i += 10 {
			appendN(t, e.m, i, i+10, 10)
			time.Sleep(5 * time.Millisecond) // a producer's pace, so that live records arrive during the history read
		}
		if err := <-done; err == nil || err.Error() != "done" {
			t.Fatal(err)
		}
		checkRun(t, recs, 0, 700)
		if metas[0].Meta.History != monitor.HistoryLoki {
			t.Errorf("meta %+v, want history from Loki", metas[0].Meta)
		}
		if n := counter(t, e.m, "cosmicac_monitor_history_reads_total", "result", "ok"); n == 0 {
			t.Error("no history read from Loki")
		}
		// And the whole history without follow.
		waitIn(t, lk, 700)
		all, _, err := collect(ctx, e.c, client.LogOptions{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkRun(t, all, 0, 700)
		if all[0].Team != "ml" || all[0].Stream != "stdout" || all[0].Time.IsZero() {
			t.Errorf("a record read back from Loki: %+v", all[0])
		}
	})
}

// retryWaits is a slog.Handler that keeps the wait of each "push to loki
// failed; retrying" record: what the monitor decided to wait, not how long
// the test took.
type retryWaits struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (h *retryWaits) Enabled(context.Context, slog.Level) bool { return true }
func (h *retryWaits) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *retryWaits) WithGroup(string) slog.Handler            { return h }
func (h *retryWaits) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "push to loki failed; retrying" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "wait" {
			h.mu.Lock()
			h.waits = append(h.waits, a.Value.Duration())
			h.mu.Unlock()
		}
		return true
	})
	return nil
}

func (h *retryWaits) get() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.waits)
}
