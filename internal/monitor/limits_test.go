package monitor_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/monitor"
	"github.com/cosmicac/cosmicac/internal/monitor/lokitest"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// The monitor against Loki's limits (docs/logs.md, "Loki's limits"): each
// test runs against the fake (lokitest.Server, which applies them) and,
// when hack/build-loki.sh has built one ($COSMICAC_LOKI_BIN), a real Loki.

// aLoki is a Loki under test: the fake (with fake set) or a real one.
type aLoki struct {
	url  string
	fake *lokitest.Server
}

// eachLoki runs fn against the fake and against a real Loki.
func eachLoki(t *testing.T, fn func(t *testing.T, lk aLoki)) {
	eachLokiLimited(t, lokiLimits{}, fn)
}

// lokiLimits are limits other than Loki's defaults, for both Lokis.
type lokiLimits struct {
	fake func(*lokitest.Limits) // changes the fake's DefaultLimits
	real []string               // lines of the real one's limits_config
}

// eachLokiLimited is eachLoki with the Lokis under lim.
func eachLokiLimited(t *testing.T, lim lokiLimits, fn func(t *testing.T, lk aLoki)) {
	t.Run("fake", func(t *testing.T) {
		f := lokitest.New()
		t.Cleanup(f.Close)
		if lim.fake != nil {
			l := lokitest.DefaultLimits()
			lim.fake(&l)
			f.SetLimits(l)
		}
		fn(t, aLoki{url: f.URL, fake: f})
	})
	t.Run("real", func(t *testing.T) {
		r := lokitest.Start(t, lim.real...)
		fn(t, aLoki{url: r.URL})
	})
}

// waitIn waits until lk holds n records of jobA.
func waitIn(t testing.TB, lk aLoki, n int) {
	t.Helper()
	if lk.fake != nil {
		waitLoki(t, lk.fake, n)
		return
	}
	waitLines(t, lk.url, jobA, n)
}

func limitsConfig(lk aLoki, dir string) monitor.Config {
	cfg := monitor.DefaultConfig(dir)
	cfg.Loki.URL = lk.url
	cfg.Loki.MinBackoff = config.Duration(10 * time.Millisecond)
	cfg.Loki.MaxBackoff = config.Duration(200 * time.Millisecond)
	cfg.Loki.BatchWait = config.Duration(5 * time.Millisecond)
	return cfg
}

// lokiStream is a stream of a query_range answer.
type lokiStream struct {
	Labels  map[string]string
	Entries [][]json.RawMessage
}

// queryLoki asks Loki itself (not the monitor) for job's entries of the
// last 720h, as one client would.
func queryLoki(t testing.TB, base, job string) []lokiStream {
	t.Helper()
	now := time.Now()
	q := url.Values{
		"query":     {`{job="` + job + `"}`},
		"start":     {strconv.FormatInt(now.Add(-720*time.Hour).UnixNano(), 10)},
		"end":       {strconv.FormatInt(now.Add(time.Hour).UnixNano(), 10)},
		"limit":     {"5000"},
		"direction": {"forward"},
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/loki/api/v1/query_range?"+q.Encode(), nil)
	req.Header.Set("X-Loki-Response-Encoding-Flags", "categorize-labels")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var qr struct {
		Data struct {
			Result []struct {
				Stream map[string]string   `json:"stream"`
				Values [][]json.RawMessage `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("query_range: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&qr); err != nil {
		t.Fatal(err)
	}
	var out []lokiStream
	for _, r := range qr.Data.Result {
		out = append(out, lokiStream{Labels: r.Stream, Entries: r.Values})
	}
	return out
}

// lokiLines is every line of job in Loki (of the last 720h, up to 5000).
func lokiLines(t testing.TB, base, job string) []string {
	t.Helper()
	var lines []string
	for _, s := range queryLoki(t, base, job) {
		for _, v := range s.Entries {
			var l string
			json.Unmarshal(v[1], &l)
			lines = append(lines, l)
		}
	}
	return lines
}

// lokiEntries is every entry of jobA in lk (for a real Loki: of the last
// 720h, up to 5000), with its timestamp and line.
func lokiEntries(t testing.TB, lk aLoki) []lokitest.Entry {
	t.Helper()
	if lk.fake != nil {
		return lk.fake.Entries(map[string]string{"job": jobA})
	}
	var out []lokitest.Entry
	for _, s := range queryLoki(t, lk.url, jobA) {
		for _, v := range s.Entries {
			var ts, l string
			json.Unmarshal(v[0], &ts)
			json.Unmarshal(v[1], &l)
			n, err := strconv.ParseInt(ts, 10, 64)
			if err != nil {
				t.Fatalf("timestamp %q: %v", ts, err)
			}
			out = append(out, lokitest.Entry{TS: n, Line: l, Labels: s.Labels})
		}
	}
	if len(out) >= 5000 {
		t.Fatal("5000 entries or more: the test reads one page")
	}
	return out
}

// waitLines waits until Loki holds n lines of job, and returns them. It
// fails when Loki takes no new line within waittest.Timeout, not when the
// whole drain takes longer: under a rate limit the drain takes as long as
// the limit makes it, and a loaded machine (CI runs packages side by side)
// slows Loki too.
func waitLines(t testing.TB, base, job string, n int) []string {
	t.Helper()
	var lines []string
	for have := 0; ; have = len(lines) {
		waittest.Until(t, func() bool {
			lines = lokiLines(t, base, job)
			return len(lines) >= n || len(lines) > have
		}, "Loki to hold %d lines of the job (it held %d, and took none since)", n, have)
		if len(lines) >= n {
			return lines
		}
	}
}

// dropped is cosmicac_monitor_loki_records_dropped_total{reason}.
func dropped(t testing.TB, m *monitor.Monitor, reason string) float64 {
	t.Helper()
	return counter(t, m, "cosmicac_monitor_loki_records_dropped_total", "reason", reason)
}

// spoolWhileAway appends n records to a monitor on dir numbered by now
// while Loki is away, and stops it: a spool of that age.
func spoolWhileAway(t *testing.T, dir string, now time.Time, n int) {
	t.Helper()
	var rs []joblog.Record
	for i := range n {
		rs = append(rs, rec(i))
	}
	spoolRecords(t, dir, now, rs)
}

// spoolRecords appends rs (in batches of 10) to a monitor on dir whose
// clock says now, while Loki is away, and stops it.
func spoolRecords(t *testing.T, dir string, now time.Time, rs []joblog.Record) {
	t.Helper()
	cfg := monitor.DefaultConfig(dir)
	cfg.Loki.URL = "http://127.0.0.1:1" // nothing listens
	cfg.Loki.MinBackoff = config.Duration(time.Hour)
	m, err := monitor.New(cfg, monitor.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	monitor.SetClock(m, func() time.Time { return now })
	for i := 0; i < len(rs); i += 10 {
		if _, err := m.Append(context.Background(), rs[i:min(i+10, len(rs))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// counter is the value of the counter name{label=value}.
func counter(t testing.TB, m *monitor.Monitor, name, label, value string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, x := range mf.GetMetric() {
			for _, l := range x.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return x.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// A spool older than Loki takes (after an outage of over a week) is
// dropped, counted and noted in the job's history, not retried for ever;
// with the monitor's own check off, Loki's 400 says the same.
func TestSpoolOlderThanLokiTakesIsReported(t *testing.T) {
	for _, screen := range []bool{true, false} {
		t.Run("monitor-checks-"+strconv.FormatBool(screen), func(t *testing.T) {
			eachLoki(t, func(t *testing.T, lk aLoki) {
				dir := t.TempDir()
				spoolWhileAway(t, dir, time.Now().Add(-8*24*time.Hour), 50)
				cfg := limitsConfig(lk, dir)
				job := jobA
				if !screen {
					cfg.Loki.Limits.RejectOldSamplesMaxAge = -1 // push them: Loki refuses
				}
				e := start(t, cfg, false)
				waittest.Until(t, func() bool { return dropped(t, e.m, "too_old") == 50 }, "50 records counted as too old (%v)", dropped(t, e.m, "too_old"))
				lines := waitLines(t, lk.url, job, 1)
				if len(lines) != 1 || !strings.Contains(lines[0], "50 log records not stored in Loki (too_old)") {
					t.Fatalf("Loki holds %q, want only the note of 50 records too old", lines)
				}
				if lk.fake != nil && !screen {
					if d := lk.fake.Discarded()["greater_than_max_sample_age"]; d != 50 {
						t.Errorf("the fake refused %d as too old, want 50 (once each)", d)
					}
				}
				// The history a viewer reads says so.
				recs, _, err := collect(context.Background(), e.c, client.LogOptions{}, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) == 0 || recs[len(recs)-1].Step != monitor.StepLokiDropped {
					t.Errorf("history %+v, want the note last", recs)
				}
			})
		})
	}
}

// One line too long in a batch: Loki stores the rest and answers 400; the
// monitor narrows the batch down to that record, drops and counts it
// alone, and every other record is in Loki once.
func TestOneLongLineDropsOnlyItself(t *testing.T) {
	for _, screen := range []bool{true, false} {
		t.Run("monitor-checks-"+strconv.FormatBool(screen), func(t *testing.T) {
			eachLoki(t, func(t *testing.T, lk aLoki) {
				cfg := limitsConfig(lk, t.TempDir())
				cfg.MaxLineBytes = 1 << 20 // over Loki's max_line_size: the monitor keeps the line whole
				if !screen {
					cfg.Loki.Limits.MaxLineSize = -1
				}
				e := start(t, cfg, false)
				var rs []joblog.Record
				for i := range 100 {
					rs = append(rs, rec(i))
				}
				rs[37].Line = strings.Repeat("x", 300<<10)
				if _, err := e.m.Append(context.Background(), rs); err != nil {
					t.Fatal(err)
				}
				lines := waitLines(t, lk.url, jobA, 100)
				if len(lines) != 100 {
					t.Fatalf("Loki holds %d lines, want 99 and the note", len(lines))
				}
				seen := map[string]int{}
				for _, l := range lines {
					seen[l]++
				}
				for i := range 100 {
					if want := 1 - btoi(i == 37); seen["line "+strconv.Itoa(i)] != want {
						t.Errorf("line %d is in Loki %d times, want %d", i, seen["line "+strconv.Itoa(i)], want)
					}
				}
				if n := dropped(t, e.m, "line_too_long"); n != 1 {
					t.Errorf("dropped as too long: %v, want 1", n)
				}
				if n := metric(t, e.m, "cosmicac_monitor_loki_records_dropped_total"); n != 1 {
					t.Errorf("dropped in all: %v, want 1", n)
				}
			})
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Records more than 1h behind their stream's newest entry in Loki (a
// second writer, a clock set back) are refused by Loki's ingester; the
// monitor drops and counts them once.
func TestTooFarBehindIsDroppedOnce(t *testing.T) {
	eachLoki(t, func(t *testing.T, lk aLoki) {
		e1 := start(t, limitsConfig(lk, t.TempDir()), false)
		appendN(t, e1.m, 0, 1, 1)
		waitLines(t, lk.url, jobA, 1)
		e1.stop()

		m2, err := monitor.New(limitsConfig(lk, t.TempDir()), monitor.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		monitor.SetClock(m2, func() time.Time { return time.Now().Add(-2 * time.Hour) })
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); m2.Run(ctx, nil) }()
		defer func() { cancel(); <-done; m2.Close() }()
		appendN(t, m2, 1, 11, 10)
		waittest.Until(t, func() bool { return dropped(t, m2, "too_far_behind") >= 10 }, "10 records dropped as too far behind")
		// The note is in a stream of its own (source=system), new to
		// Loki, so Loki takes it at the second monitor's time.
		lines := waitLines(t, lk.url, jobA, 2)
		slices.Sort(lines) // the note sorts first
		if len(lines) != 2 || lines[1] != "line 0" || !strings.Contains(lines[0], "10 log records not stored in Loki (too_far_behind)") {
			t.Errorf("Loki holds %q, want the first record and the note of 10 too far behind", lines)
		}
	})
}

// Loki adds service_name (the job ID, from its discover_service_name
// list) and detected_level; the monitor's labels and metadata survive, in
// both push formats.
func TestLokiLabels(t *testing.T) {
	for _, format := range []string{"protobuf", "json"} {
		t.Run(format, func(t *testing.T) { testLokiLabels(t, format) })
	}
}

func testLokiLabels(t *testing.T, format string) {
	eachLoki(t, func(t *testing.T, lk aLoki) {
		cfg := limitsConfig(lk, t.TempDir())
		cfg.Loki.Format = format
		e := start(t, cfg, false)
		r := rec(0)
		r.Line = "ERROR: disk full"
		if _, err := e.m.Append(context.Background(), []joblog.Record{r}); err != nil {
			t.Fatal(err)
		}
		waitLines(t, lk.url, jobA, 1)
		ss := queryLoki(t, lk.url, jobA)
		got := ss[0].Labels
		for k, v := range map[string]string{"job": jobA, "team": "ml", "source": "application", "replica": "0", "service_name": jobA} {
			if got[k] != v {
				t.Errorf("label %s=%q, want %q (%v)", k, got[k], v, got)
			}
		}
		var md struct {
			StructuredMetadata map[string]string `json:"structuredMetadata"`
		}
		json.Unmarshal(ss[0].Entries[0][2], &md)
		if md.StructuredMetadata["detected_level"] != "error" || md.StructuredMetadata["stream"] != "stdout" {
			t.Errorf("structured metadata %v, want detected_level=error and stream=stdout", md.StructuredMetadata)
		}
		// Read back through the monitor.
		recs, _, err := collect(context.Background(), e.c, client.LogOptions{Since: "1h"}, 0)
		if err != nil || len(recs) != 1 || recs[0].Line != r.Line || recs[0].Stream != "stdout" {
			t.Errorf("read back %+v, %v", recs, err)
		}
	})
}

// History asks Loki in requests it accepts: pages of at most 5000 (the
// monitor's queryLimit is higher) over windows of at most 721h (its
// maxLookback is longer); a since beyond maxLookback is clamped and the
// stream says so.
func TestHistoryQueriesFitLokisLimits(t *testing.T) {
	eachLoki(t, func(t *testing.T, lk aLoki) {
		cfg := limitsConfig(lk, t.TempDir())
		cfg.BufferPerJob, cfg.ViewerMaxLag = 100, 100
		cfg.Loki.QueryLimit = 20000
		cfg.Loki.MaxLookback = config.Duration(2000 * time.Hour)
		if lk.fake != nil {
			lim := lokitest.DefaultLimits()
			lim.MaxEntriesLimitPerQuery = 70 // several pages of 300
			lk.fake.SetLimits(lim)
			cfg.Loki.Limits.MaxEntriesLimitPerQuery = 70
		}
		e := start(t, cfg, false)
		appendN(t, e.m, 0, 300, 30)
		if lk.fake != nil {
			waitLoki(t, lk.fake, 300)
		} else {
			waitLines(t, lk.url, jobA, 300)
		}
		recs, evs, err := collect(context.Background(), e.c, client.LogOptions{Since: "1900h"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == client.LogWarningEvent {
				t.Errorf("warning: %+v", ev)
			}
		}
		checkRun(t, recs, 0, 300)
		if lk.fake != nil {
			// 1900h: three windows; the last holds the 200 records older
			// than the buffer (of 100): pages of 70, 70, 60.
			if q := lk.fake.Queries(); q != 2+3 {
				t.Errorf("%d queries, want 5", q)
			}
		}

		// A since beyond maxLookback.
		recs, evs, err = collect(context.Background(), e.c, client.LogOptions{Since: "3000h"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkRun(t, recs, 0, 300)
		var warned bool
		for _, ev := range evs {
			warned = warned || ev.Type == client.LogWarningEvent && strings.Contains(ev.Message, "maxLookback")
		}
		if !warned {
			t.Errorf("no warning that since was clamped: %+v", evs)
		}
	})
}

// Loki answers 429 without Retry-After: the monitor backs off, doubling
// with jitter, and gets everything in. (One record: a push of more is
// halved after three 429s in a row; TestRateLimitedGetsEverythingIn.)
func TestRateLimitedBacksOffWithJitter(t *testing.T) {
	lk := lokitest.New()
	defer lk.Close()
	lk.RateLimitNext(4)
	cfg := lokiConfig(t, lk, t.TempDir())
	cfg.Loki.MinBackoff = config.Duration(40 * time.Millisecond)
	cfg.Loki.MaxBackoff = config.Duration(time.Second)
	waits := &retryWaits{}
	e := startLogged(t, cfg, false, slog.New(waits))
	appendN(t, e.m, 0, 1, 1)
	waitLoki(t, lk, 1)
	w := waits.get()
	if len(w) != 4 {
		t.Fatalf("waits %v, want 4", w)
	}
	step := 40 * time.Millisecond
	for i, d := range w {
		if d < step/2 || d > step {
			t.Errorf("wait %d: %v, want within [%v, %v]", i, d, step/2, step)
		}
		step *= 2
	}
	if n := metric(t, e.m, "cosmicac_monitor_loki_records_dropped_total"); n != 0 {
		t.Errorf("dropped %v", n)
	}
}

// A tenant's ingestion rate, small: 50 KiB/s with a 20 KiB burst (the
// distributor's token bucket, local strategy).
var smallIngestionRate = lokiLimits{
	fake: func(l *lokitest.Limits) { l.IngestionRate, l.IngestionBurst = 0.05*(1<<20), 20971 }, // int(0.02 MiB), as Loki rounds,
	real: []string{"ingestion_rate_strategy: local", "ingestion_rate_mb: 0.05", "ingestion_burst_size_mb: 0.02"},
}

// A stream's rate, small: the same in the ingester's per-stream bucket.
var smallStreamRate = lokiLimits{
	fake: func(l *lokitest.Limits) { l.PerStreamRate, l.PerStreamBurst = 52428, 20971 },
	real: []string{"per_stream_rate_limit: 52428", "per_stream_rate_limit_burst: 20971"},
}

// Over a tenant's ingestion rate (the distributor's) or a stream's (the
// ingester's), Loki answers 429 without Retry-After, and refuses a push
// larger than the burst every time. The monitor backs off with jitter,
// pushes halves of a push rate limited again and again, and gets every
// record in once, none dropped; the 429s are counted.
func TestRateLimitedGetsEverythingIn(t *testing.T) {
	for _, c := range []struct {
		name string
		lim  lokiLimits
	}{{"ingestion-rate", smallIngestionRate}, {"per-stream-rate", smallStreamRate}} {
		t.Run(c.name, func(t *testing.T) { testRateLimited(t, c.lim) })
	}
}

func testRateLimited(t *testing.T, lim lokiLimits) {
	eachLokiLimited(t, lim, func(t *testing.T, lk aLoki) {
		dir := t.TempDir()
		// 200 KiB in the spool: one push of ten bursts.
		const n = 200
		pad := strings.Repeat("x", 1000)
		var rs []joblog.Record
		for i := range n {
			r := rec(i)
			r.Line += " " + pad
			rs = append(rs, r)
		}
		spoolRecords(t, dir, time.Now(), rs)
		cfg := limitsConfig(lk, dir)
		waits := &retryWaits{}
		e := startLogged(t, cfg, false, slog.New(waits))
		t.Cleanup(func() {
			if t.Failed() {
				// What the monitor thinks it did, when the wait for Loki ran
				// out (seen under load: Loki took none of the last records,
				// and refused nothing, for 24 s).
				t.Logf("the monitor: records Loki took %v (a re-pushed half counts again), dropped %v, 429s %v, halvings %v, retries %d",
					metric(t, e.m, "cosmicac_monitor_loki_records_sent_total"), metric(t, e.m, "cosmicac_monitor_loki_records_dropped_total"),
					counter(t, e.m, "cosmicac_monitor_loki_push_errors_total", "code", "429"),
					metric(t, e.m, "cosmicac_monitor_loki_rate_limited_splits_total"), len(waits.get()))
				if lk.fake == nil {
					t.Logf("Loki's own counts:\n%s", lokiCounts(lk.url))
				}
			}
		})
		lines := waitLines(t, lk.url, jobA, n)
		seen := map[string]int{}
		for _, l := range lines {
			seen[l]++
		}
		for _, r := range rs {
			if seen[r.Line] != 1 {
				t.Errorf("%.8s… is in Loki %d times, want once", r.Line, seen[r.Line])
			}
		}
		if len(lines) != n {
			t.Errorf("Loki holds %d lines, want %d", len(lines), n)
		}
		if d := metric(t, e.m, "cosmicac_monitor_loki_records_dropped_total"); d != 0 {
			t.Errorf("dropped %v, want none", d)
		}
		limited := counter(t, e.m, "cosmicac_monitor_loki_push_errors_total", "code", "429")
		if limited < 3 {
			t.Errorf("429s counted: %v, want at least 3 (a push of ten bursts)", limited)
		}
		if s := metric(t, e.m, "cosmicac_monitor_loki_rate_limited_splits_total"); s < 1 {
			t.Errorf("rate-limited pushes split: %v, want at least one", s)
		}
		// The waits: jittered, within [minBackoff/2, maxBackoff], and
		// one per 429 that was retried.
		w := waits.get()
		if len(w) == 0 {
			t.Fatal("no retries logged")
		}
		for i, d := range w {
			if d < cfg.Loki.MinBackoff.D()/2 || d > cfg.Loki.MaxBackoff.D() {
				t.Errorf("wait %d: %v, want within [%v, %v]", i, d, cfg.Loki.MinBackoff.D()/2, cfg.Loki.MaxBackoff.D())
			}
		}
		if float64(len(w)) > limited {
			t.Errorf("%d waits for %v 429s", len(w), limited)
		}
		if len(w) > 1 && slices.Min(w) == slices.Max(w) {
			t.Errorf("every wait was %v: no jitter", w[0])
		}
		if lk.fake != nil {
			if d := lk.fake.Discarded(); d["rate_limited"]+d["per_stream_rate_limit"] == 0 {
				t.Error("the fake rate limited nothing")
			}
		}
	})
}

// Loki refuses an entry newer than now + creation_grace_period (10m). A
// spool with a record numbered 20 minutes ahead (its monitor's clock was
// ahead) ends in Loki without it: dropped, counted, noted, the rest of the
// batch stored once. The note is numbered after that record, so it is in
// the future too and Loki refuses it as well (counted, not noted again);
// the monitor's own history holds it.
func TestTooNewIsDroppedAndTheRestStored(t *testing.T) {
	for _, screen := range []bool{true, false} {
		t.Run("monitor-checks-"+strconv.FormatBool(screen), func(t *testing.T) {
			eachLoki(t, func(t *testing.T, lk aLoki) {
				dir := t.TempDir()
				spoolWhileAway(t, dir, time.Now(), 50)
				spoolRecords(t, dir, time.Now().Add(20*time.Minute), []joblog.Record{rec(50)})
				cfg := limitsConfig(lk, dir)
				if !screen {
					cfg.Loki.Limits.CreationGracePeriod = -1 // push it: Loki refuses
				}
				e := start(t, cfg, false)
				waittest.Until(t, func() bool { return dropped(t, e.m, "too_new") == 2 }, "the record and its note counted as too new (%v)", dropped(t, e.m, "too_new"))
				lines := waitLines(t, lk.url, jobA, 50)
				seen := map[string]int{}
				for _, l := range lines {
					seen[l]++
				}
				for i := range 50 {
					if seen["line "+strconv.Itoa(i)] != 1 {
						t.Errorf("line %d is in Loki %d times, want once", i, seen["line "+strconv.Itoa(i)])
					}
				}
				if len(lines) != 50 {
					t.Errorf("Loki holds %d lines, want the 50 before the one too new: %q", len(lines), lines)
				}
				if d := metric(t, e.m, "cosmicac_monitor_loki_records_dropped_total"); d != 2 {
					t.Errorf("dropped in all: %v, want 2", d)
				}
				if lk.fake != nil && !screen && lk.fake.Discarded()["too_far_in_future"] == 0 {
					t.Error("the fake refused nothing as too new")
				}
				recs, _, err := collect(context.Background(), e.c, client.LogOptions{}, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) != 51 {
					t.Fatalf("history holds %d records, want 50 and the note", len(recs))
				}
				checkRun(t, recs[:50], 0, 50)
				if n := recs[50]; n.Step != monitor.StepLokiDropped || !strings.Contains(n.Line, "1 log records not stored in Loki (too_new)") {
					t.Errorf("history ends with %+v, want the note of 1 record too new", n)
				}
			})
		})
	}
}

// pushRaw pushes values ([ns, line]) of one stream {job=jobA} to base as
// JSON, returning Loki's answer and its text.
func pushRaw(t *testing.T, base string, values ...[2]string) (*http.Response, string) {
	t.Helper()
	var vs []string
	for _, v := range values {
		vs = append(vs, `["`+v[0]+`","`+v[1]+`"]`)
	}
	body := `{"streams":[{"stream":{"job":"` + jobA + `"},"values":[` + strings.Join(vs, ",") + `]}]}`
	resp, err := http.Post(base+"/loki/api/v1/push", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, strings.TrimSpace(string(b))
}

// checkAnswer reports unless Loki answered status, a message that starts
// with prefix and ends with suffix, as plain text, nosniff, no Retry-After.
func checkAnswer(t *testing.T, name string, resp *http.Response, msg string, status int, prefix, suffix string) {
	t.Helper()
	if resp.StatusCode != status || !strings.HasPrefix(msg, prefix) || !strings.HasSuffix(msg, suffix) {
		t.Errorf("%s: %d %q, want %d %q…%q", name, resp.StatusCode, msg, status, prefix, suffix)
	}
	for k, v := range map[string]string{"Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff", "Retry-After": ""} {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s: %s %q, want %q", name, k, got, v)
		}
	}
}

func nsFromNow(d time.Duration) string { return strconv.FormatInt(time.Now().Add(d).UnixNano(), 10) }

// Loki's answers to what it refuses, as the fake gives them: status,
// headers and the message.
func TestFakeAnswersAsLokiDoes(t *testing.T) {
	// Stream labels as Loki prints them: service_name added.
	stream := `{job="` + jobA + `", service_name="` + jobA + `"}`
	ns := nsFromNow
	t.Run("per-stream-rate", func(t *testing.T) {
		eachLokiLimited(t, smallStreamRate, func(t *testing.T, lk aLoki) {
			big := strings.Repeat("x", 15000) // two: over the stream's burst
			resp, msg := pushRaw(t, lk.url, [2]string{ns(0), big}, [2]string{ns(0), big + "y"})
			checkAnswer(t, "over the stream's burst", resp, msg, http.StatusTooManyRequests,
				"entry with timestamp ", "ignored, reason: 'Per stream rate limit exceeded (limit: 52428B/sec) while attempting to ingest for stream '"+stream+"' totaling 15001B, consider splitting a stream via additional labels or contact your Loki administrator to see if the limit can be increased',\nuser 'fake', total ignored: 2 out of 2 for stream: "+stream)
			if got := lokiLines(t, lk.url, jobA); len(got) != 0 {
				t.Errorf("Loki holds %d lines, want none", len(got))
			}
		})
	})
	t.Run("ingestion-rate", func(t *testing.T) {
		eachLokiLimited(t, smallIngestionRate, func(t *testing.T, lk aLoki) {
			push := func(values ...[2]string) (*http.Response, string) { return pushRaw(t, lk.url, values...) }
			check := func(name string, resp *http.Response, msg string, status int, prefix string) {
				t.Helper()
				checkAnswer(t, name, resp, msg, status, prefix, "")
			}
			resp, msg := push([2]string{ns(20 * time.Minute), "a"})
			check("one too new", resp, msg, http.StatusBadRequest, "entry for stream '"+stream+"' has timestamp too new: ")
			later := ns(20 * time.Minute) // one time: Loki's message has it to the second
			resp, msg = push([2]string{ns(0), "b"}, [2]string{later, "c"}, [2]string{later, "d"})
			check("two too new", resp, msg, http.StatusBadRequest, "2 errors like: entry for stream '"+stream+"' has timestamp too new: ")
			big := strings.Repeat("x", 30<<10) // over the burst of 20 KiB
			resp, msg = push([2]string{ns(0), big})
			check("over the burst", resp, msg, http.StatusTooManyRequests, "ingestion rate limit exceeded for user fake (limit: 52428 bytes/sec) while attempting to ingest '1' lines totaling '")
			if got := lokiLines(t, lk.url, jobA); len(got) != 1 || got[0] != "b" {
				t.Errorf("Loki holds %q, want only b", got)
			}
		})
	})
}

// lokiCounts is what a real Loki's /metrics says it received, discarded
// (by reason) and stored, for a failure's log: whether records were lost
// on the way in or are missing from the answers to queries.
func lokiCounts(base string) string {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out []string
	for l := range strings.Lines(string(b)) {
		for _, m := range []string{"loki_discarded_samples_total", "loki_distributor_lines_received_total", "loki_ingester_chunks_stored_total", "loki_ingester_streams_created_total", "loki_ingester_memory_streams"} {
			if strings.HasPrefix(l, m) {
				out = append(out, strings.TrimSpace(l))
			}
		}
	}
	return strings.Join(out, "\n")
}
