package monitor_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/monitor"
	"github.com/cosmicac/cosmicac/internal/monitor/lokitest"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// The monitor's bounds (docs/logs.md, "Bounds"): what one producer or one
// viewer can make the monitor hold.

const jobB = "00000000-0000-4000-8000-00000000000b"

// agentOf returns a fabric node holding the agent key of jobA's replica 0
// on rack a, admitted by m, and a function appending records as it.
func agentOf(t *testing.T, m *monitor.Monitor) func(ctx context.Context, recs ...joblog.Record) joblog.AppendReply {
	t.Helper()
	ring := trust.NewKeyring()
	mon := node(t, "wrk-monitor", trust.NewPolicy(trust.Monitor, ring))
	src := &lateOrk{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go ring.Follow(ctx, src, nil)
	m.Serve(mon, ring)
	agent := node(t, "agent", nil)
	agent.AddAddrs(mon.PublicKey(), mon.Addr())
	src.set(orkapi.Peers{Epoch: "e", Version: 1,
		Placements: []orkapi.Placement{{Job: jobA, Team: "t1", Type: cosmic.TypeGPUContainer, Rack: "a", AgentKeys: []string{agent.PublicKey().String()}}}}, false)
	<-ring.Synced()
	return func(ctx context.Context, recs ...joblog.Record) joblog.AppendReply {
		t.Helper()
		var rep joblog.AppendReply
		if err := agent.Call(ctx, mon.PublicKey(), joblog.Append.Name, joblog.AppendParams{Records: recs}, &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestAppendBoundedInBytes (issue 31, finding 4): a job's agent that sends
// 48 records of 4 MiB each has each cut to the line cap, and however much
// it sends, its job's buffer holds at most BufferBytesPerJob; what is cut
// or evicted is counted.
func TestAppendBoundedInBytes(t *testing.T) {
	cfg := monitor.DefaultConfig("")
	perJob, lineCap := float64(cfg.BufferBytesPerJob), cfg.MaxLineBytes
	e := start(t, cfg, false)
	appendAs := agentOf(t, e.m)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The first records come through the fabric as the agent's; the rest
	// straight to Append, the same path after the agent's confinement (4
	// MiB through the fabric costs a second each under -race).
	before := heapAlloc()
	huge := strings.Repeat("x", 4<<20)
	for i := range 48 {
		r := rec(i)
		r.Line = huge
		if i < 4 {
			if rep := appendAs(ctx, r); rep.Accepted != 1 {
				t.Fatalf("record %d: %+v", i, rep)
			}
			continue
		}
		r.Team = "t1"
		if _, err := e.m.Append(ctx, []joblog.Record{r}); err != nil {
			t.Fatal(err)
		}
	}
	huge = ""
	if n := metric(t, e.m, "cosmicac_monitor_lines_truncated_total"); n != 48 {
		t.Errorf("lines truncated: %v, want 48", n)
	}
	if held := metric(t, e.m, "cosmicac_monitor_buffer_bytes"); held > perJob || held == 0 {
		t.Errorf("the buffers hold %v bytes, want some and at most %v", held, perJob)
	}
	if grown := int64(heapAlloc()) - int64(before); grown > 64<<20 {
		t.Errorf("the heap grew by %d MiB for 48 records of 4 MiB", grown>>20)
	}
	recs, _, err := collect(ctx, e.c, client.LogOptions{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 48 || len(recs[0].Line) > lineCap {
		t.Fatalf("read back %d records, the first of %d bytes; want 48 of at most %d", len(recs), len(recs[0].Line), lineCap)
	}

	// Lines just under the cap: the job's buffer evicts its oldest for
	// bytes, and counts them.
	line := strings.Repeat("y", 60<<10)
	for i := 0; i < 1000; i += 50 {
		var rs []joblog.Record
		for k := range 50 {
			r := rec(i + k)
			r.Line = line
			rs = append(rs, r)
		}
		if rep := appendAs(ctx, rs...); rep.Accepted != 50 {
			t.Fatalf("batch %d: %+v", i, rep)
		}
	}
	if held := metric(t, e.m, "cosmicac_monitor_buffer_bytes"); held > perJob || held < perJob/2 {
		t.Errorf("the buffers hold %v bytes after 60 MiB, want at most %v (and most of that)", held, perJob)
	}
	if n := counter(t, e.m, "cosmicac_monitor_buffer_evicted_total", "reason", "job_bytes"); n == 0 {
		t.Error("no record counted as evicted for the job's bytes")
	}
}

// TestLongLineTruncatedAtAppend: a line over MaxLineBytes is cut at a
// character boundary and ends with a marker saying so; the record keeps
// its place; a line of exactly the cap is left alone.
func TestLongLineTruncatedAtAppend(t *testing.T) {
	cfg := monitor.DefaultConfig("")
	lineCap := cfg.MaxLineBytes
	e := start(t, cfg, false)
	long := rec(0)
	long.Line = "start " + strings.Repeat("é", 100<<10)
	exact := rec(1)
	exact.Line = strings.Repeat("z", lineCap)
	if _, err := e.m.Append(context.Background(), []joblog.Record{long, exact, rec(2)}); err != nil {
		t.Fatal(err)
	}
	recs, _, err := collect(context.Background(), e.c, client.LogOptions{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("got %d records, want 3", len(recs))
	}
	got := recs[0].Line
	if len(got) > lineCap || !utf8.ValidString(got) || !strings.HasPrefix(got, "start éé") ||
		!strings.Contains(got, "truncated") || !strings.Contains(got, fmt.Sprint(len(long.Line))) {
		t.Errorf("the long line came back as %d bytes (valid UTF-8: %v), ending %q", len(got), utf8.ValidString(got), got[max(len(got)-120, 0):])
	}
	if recs[1].Line != exact.Line || recs[2].Line != "line 2" {
		t.Errorf("the other lines were changed: %d bytes, %q", len(recs[1].Line), recs[2].Line)
	}
	if n := metric(t, e.m, "cosmicac_monitor_lines_truncated_total"); n != 1 {
		t.Errorf("lines truncated: %v, want 1", n)
	}
}

// TestSpoolBoundedPerJob: while Loki takes nothing, one job fills only its
// share of the spool; its further records are refused (counted, in the
// reply's Refused), another job's are still taken, and once Loki has
// drained the spool the job's next records come after a note of the hole.
func TestSpoolBoundedPerJob(t *testing.T) {
	lk := lokitest.New()
	t.Cleanup(lk.Close)
	cfg := lokiConfig(t, lk, t.TempDir())
	cfg.Loki.SpoolBytes, cfg.Loki.SegmentBytes, cfg.Loki.SpoolBytesPerJob = 4<<20, 1<<20, 256<<10
	m, err := monitor.New(cfg, monitor.Deps{Viewers: allowAll})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Run is not started: the spool only fills.
	batch := func(job string, from int) []joblog.Record {
		var rs []joblog.Record
		for i := range 10 {
			r := rec(from + i)
			r.JobID, r.Line = job, r.Line+" "+strings.Repeat("x", 8<<10)
			rs = append(rs, r)
		}
		return rs
	}
	accepted, refused := 0, 0
	for i := 0; i < 1000 && refused == 0; i += 10 {
		rep, err := m.Append(ctx, batch(jobA, i))
		if err != nil {
			t.Fatalf("job A's batch %d: %v (the whole spool is full)", i, err)
		}
		accepted += rep.Accepted
		refused += rep.Refused
	}
	if refused == 0 || accepted*(8<<10) > 256<<10 {
		t.Fatalf("job A: %d records accepted (about %d KiB), %d refused; want refusals at its share", accepted, accepted*8, refused)
	}
	if n := counter(t, m, "cosmicac_monitor_records_rejected_total", "reason", "spool_share"); int(n) != refused {
		t.Errorf("rejected for the job's share: %v, want %d", n, refused)
	}
	for i := 0; i < 20; i += 10 {
		if rep, err := m.Append(ctx, batch(jobB, i)); err != nil || rep.Accepted != 10 {
			t.Fatalf("job B: %+v, %v", rep, err)
		}
	}

	// Loki drains the spool; job A's next record is taken, after a note.
	// Run ends before the spool is closed (Monitor.Close's contract):
	// cleanups run last first, so this one runs before m.Close's.
	ran := make(chan struct{})
	go func() { defer close(ran); m.Run(ctx, nil) }()
	t.Cleanup(func() { cancel(); <-ran })
	waittest.Until(t, func() bool { return metric(t, m, "cosmicac_monitor_spool_bytes") == 0 }, "Loki to drain the spool")
	if rep, err := m.Append(ctx, []joblog.Record{rec(9999)}); err != nil || rep.Accepted != 1 {
		t.Fatalf("job A after the drain: %+v, %v", rep, err)
	}
	recs, _, err := collect(ctx, client.New(srv.URL, "tok"), client.LogOptions{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := len(recs)
	if n < 2 || recs[n-1].Line != "line 9999" || recs[n-2].Step != "log_dropped" || !strings.Contains(recs[n-2].Line, fmt.Sprint(refused)) {
		t.Fatalf("the job's last records: %+v; want a log_dropped note of %d, then line 9999", recs[max(n-2, 0):], refused)
	}
}

// TestFollowsPerUserBounded: one user holds at most MaxFollowsPerUser
// follows at once, whichever of their tokens each uses; the next is
// refused with a JSON 429, another user is not, and a follow closed
// frees its place.
func TestFollowsPerUserBounded(t *testing.T) {
	cfg := monitor.DefaultConfig("")
	perUser := cfg.MaxFollowsPerUser
	users := map[string]string{"Bearer a1": "alice", "Bearer a2": "alice", "Bearer b": "bob"}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, ok := users[r.Header.Get("Authorization")]
		switch {
		case !ok:
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":{"code":"unauthorized","message":"invalid token"}}`))
		case r.URL.Path == "/api/v1/whoami":
			fmt.Fprintf(w, `{"user":%q}`, u)
		default:
			w.Write([]byte(`{}`))
		}
	})
	m, err := monitor.New(cfg, monitor.Deps{Viewers: monitor.NewAPIAuthorizer("http://app-node", monitor.HandlerTransport(api))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	defer srv.CloseClientConnections()

	var mu sync.Mutex
	var open []context.CancelFunc
	follow := func(token string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+monitor.LogsPath+jobA+"/logs?follow=true", nil)
		req.Header.Set("Authorization", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			defer cancel()
			defer resp.Body.Close()
			var b strings.Builder
			fmt.Fprint(&b, resp.Header.Get("Content-Type"), " ")
			buf := make([]byte, 512)
			n, _ := resp.Body.Read(buf)
			b.Write(buf[:n])
			return resp.StatusCode, b.String()
		}
		mu.Lock()
		open = append(open, func() { cancel(); resp.Body.Close() })
		mu.Unlock()
		return resp.StatusCode, ""
	}
	defer func() {
		for _, c := range open {
			c()
		}
	}()
	for i := range perUser {
		token := []string{"Bearer a1", "Bearer a2"}[i%2]
		if code, body := follow(token); code != http.StatusOK {
			t.Fatalf("follow %d of alice: %d %s", i, code, body)
		}
	}
	code, body := follow("Bearer a1")
	if code != http.StatusTooManyRequests || !strings.HasPrefix(body, "application/json") || !strings.Contains(body, `"too_many_requests"`) {
		t.Fatalf("alice's follow %d: %d %s; want a JSON 429", perUser+1, code, body)
	}
	if code, body := follow("Bearer b"); code != http.StatusOK {
		t.Fatalf("bob's first follow: %d %s", code, body)
	}
	if n := metric(t, m, "cosmicac_monitor_follows_refused_total"); n != 1 {
		t.Errorf("follows refused: %v, want 1", n)
	}
	// Alice closes one: she may open one again.
	open[0]()
	waittest.Until(t, func() bool { return metric(t, m, "cosmicac_monitor_viewers") == float64(perUser) }, "the closed follow to end")
	if code, body := follow("Bearer a2"); code != http.StatusOK {
		t.Fatalf("alice's follow after closing one: %d %s", code, body)
	}
}

// TestBufferBoundedAcrossJobs: over BufferBytes, the largest buffer loses
// its oldest records, so one job's flood leaves the quiet jobs' buffers
// whole; the eviction is counted.
func TestBufferBoundedAcrossJobs(t *testing.T) {
	cfg := monitor.DefaultConfig("")
	cfg.MaxLineBytes, cfg.BufferBytesPerJob, cfg.BufferBytes = 1<<10, 512<<10, 1<<20
	e := start(t, cfg, false)
	quiet := []string{jobB, "00000000-0000-4000-8000-00000000000c", "00000000-0000-4000-8000-00000000000d"}
	for _, id := range quiet {
		var rs []joblog.Record
		for i := range 100 {
			r := rec(i)
			r.JobID = id
			rs = append(rs, r)
		}
		if _, err := e.m.Append(context.Background(), rs); err != nil {
			t.Fatal(err)
		}
	}
	line := strings.Repeat("x", 900)
	for i := 0; i < 5000; i += 100 {
		var rs []joblog.Record
		for k := range 100 {
			r := rec(i + k)
			r.Line = line
			r.JobID = fmt.Sprintf("00000000-0000-4000-8000-%012d", 100+(i+k)%3) // three loud jobs
			rs = append(rs, r)
		}
		if _, err := e.m.Append(context.Background(), rs); err != nil {
			t.Fatal(err)
		}
	}
	if held := metric(t, e.m, "cosmicac_monitor_buffer_bytes"); held > float64(cfg.BufferBytes) {
		t.Errorf("the buffers hold %v bytes, want at most %d", held, cfg.BufferBytes)
	}
	if n := counter(t, e.m, "cosmicac_monitor_buffer_evicted_total", "reason", "total_bytes"); n == 0 {
		t.Error("no record counted as evicted for the total")
	}
	for _, id := range quiet {
		var n int
		err := e.c.JobLogs(context.Background(), id, client.LogOptions{}, func(ev client.LogEvent) error {
			if ev.Type == client.LogRecordEvent {
				n++
			}
			return nil
		})
		if err != nil || n != 100 {
			t.Errorf("quiet job %s: %d records (%v), want its 100", id, n, err)
		}
	}
}

// TestLongNamesAreRefused: a job, team, stream or step is a name; one
// longer than 256 bytes makes the batch a bad request, as a record
// without a job does.
func TestLongNamesAreRefused(t *testing.T) {
	e := start(t, monitor.DefaultConfig(""), false)
	for _, set := range []func(*joblog.Record){
		func(r *joblog.Record) { r.Team = strings.Repeat("t", 257) },
		func(r *joblog.Record) { r.Stream = strings.Repeat("s", 257) },
		func(r *joblog.Record) { r.Step = strings.Repeat("p", 257) },
	} {
		r := rec(0)
		set(&r)
		if _, err := e.m.Append(context.Background(), []joblog.Record{rec(1), r}); err == nil {
			t.Errorf("a record with a long name was taken: team %d, stream %d, step %d bytes", len(r.Team), len(r.Stream), len(r.Step))
		}
	}
	if n := counter(t, e.m, "cosmicac_monitor_records_rejected_total", "reason", "invalid"); n != 6 {
		t.Errorf("rejected as invalid: %v, want 6", n)
	}
}

// TestBoundsValidate: each bound is checked.
func TestBoundsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*monitor.Config)
		want string // in the error; "" for none
	}{
		{"defaults", func(*monitor.Config) {}, ""},
		{"line cap too small", func(c *monitor.Config) { c.MaxLineBytes = 100 }, "maxLineBytes"},
		{"job buffer under 4 lines", func(c *monitor.Config) { c.BufferBytesPerJob = 100 << 10 }, "bufferBytesPerJob"},
		{"all buffers under 4 lines", func(c *monitor.Config) { c.BufferBytes = 100 << 10 }, "bufferBytes"},
		{"no follows", func(c *monitor.Config) { c.MaxFollowsPerUser = -1 }, "maxFollowsPerUser"},
		{"spool share under 4 lines", func(c *monitor.Config) { c.Loki.URL = "http://loki:3100"; c.Loki.SpoolBytesPerJob = 100 << 10 }, "loki.spoolBytesPerJob"},
		{"spool share over the spool", func(c *monitor.Config) { c.Loki.URL = "http://loki:3100"; c.Loki.SpoolBytesPerJob = 4 << 30 }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := monitor.DefaultConfig("/data")
			tc.set(&cfg)
			err := cfg.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate: %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
