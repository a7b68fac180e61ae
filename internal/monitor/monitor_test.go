package monitor_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/monitor"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

const jobA = "3f2a9c1e-0b7d-4c1e-9a55-2b8e4f6d7a10"

var allowAll = monitor.AuthorizerFunc(func(*http.Request, string) error { return nil })

type env struct {
	m      *monitor.Monitor
	srv    *httptest.Server
	c      *client.Client
	cancel context.CancelFunc
	done   chan struct{}
}

// start runs a monitor of cfg with its HTTP API. With small, accepted
// connections get a small send buffer, so that a viewer that does not read
// blocks the server's writes soon.
func start(t testing.TB, cfg monitor.Config, small bool) *env {
	t.Helper()
	return startLogged(t, cfg, small, nil)
}

// startLogged is start with the monitor logging to log.
func startLogged(t testing.TB, cfg monitor.Config, small bool, log *slog.Logger) *env {
	t.Helper()
	m, err := monitor.New(cfg, monitor.Deps{Viewers: allowAll, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{m: m, done: make(chan struct{})}
	e.srv = httptest.NewUnstartedServer(m.Handler())
	if small {
		e.srv.Listener = smallBufListener{e.srv.Listener}
	}
	e.srv.Start()
	e.c = client.New(e.srv.URL, "tok")
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() { defer close(e.done); m.Run(ctx, nil) }()
	t.Cleanup(e.stop)
	return e
}

func (e *env) stop() {
	select {
	case <-e.done:
		return
	default:
	}
	e.srv.CloseClientConnections()
	e.srv.Close()
	e.cancel()
	<-e.done
	e.m.Close()
}

type smallBufListener struct{ net.Listener }

func (l smallBufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(8 << 10)
	}
	return c, err
}

func rec(i int) joblog.Record {
	return joblog.Record{Time: time.Now(), JobID: jobA, Team: "ml", Source: joblog.SourceApplication, Stream: "stdout", Line: "line " + strconv.Itoa(i)}
}

// appendN appends records from..to-1 in batches.
func appendN(t testing.TB, m *monitor.Monitor, from, to, batch int) {
	t.Helper()
	for i := from; i < to; i += batch {
		var rs []joblog.Record
		for k := i; k < min(i+batch, to); k++ {
			rs = append(rs, rec(k))
		}
		if _, err := m.Append(context.Background(), rs); err != nil {
			t.Fatal(err)
		}
	}
}

func lineNo(r *client.LogRecord) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(r.Line, "line "))
	return n
}

// collect reads a job's logs until n records came or the stream ended.
func collect(ctx context.Context, c *client.Client, o client.LogOptions, n int) ([]client.LogRecord, []client.LogEvent, error) {
	var recs []client.LogRecord
	var other []client.LogEvent
	errEnough := errors.New("enough")
	err := c.JobLogs(ctx, jobA, o, func(ev client.LogEvent) error {
		if ev.Type != client.LogRecordEvent {
			other = append(other, ev)
			return nil
		}
		recs = append(recs, *ev.Record)
		if n > 0 && len(recs) >= n {
			return errEnough
		}
		return nil
	})
	if errors.Is(err, errEnough) {
		err = nil
	}
	return recs, other, err
}

// checkRun reports unless recs are lines from..from+len-1 with increasing
// numbers.
func checkRun(t testing.TB, recs []client.LogRecord, from, n int) {
	t.Helper()
	if len(recs) != n {
		t.Fatalf("got %d records, want %d", len(recs), n)
	}
	for i, r := range recs {
		if lineNo(&r) != from+i {
			t.Fatalf("record %d is %q, want line %d", i, r.Line, from+i)
		}
		if i > 0 && r.Seq <= recs[i-1].Seq {
			t.Fatalf("record %d: seq %d after %d", i, r.Seq, recs[i-1].Seq)
		}
	}
}

// TestHundredViewersAndOneStalled: one viewer that never reads holds back
// neither the producer nor a hundred healthy viewers, and is cut off.
//
// The producer appends a batch only once every healthy viewer has the one
// before, so a healthy viewer is never more than a batch (about 12 KiB,
// which the sockets' buffers hold) behind, and no write to it waits for it
// to read. Paced by the clock instead, healthy viewers fell thousands of
// records behind on a loaded machine, writes to them waited as long as the
// stalled viewer's, and WriteTimeout cut them off too.
//
// The healthy viewers hold their streams open until the cut-offs are
// counted: one that hung up as soon as it had its last record could do
// so while the monitor was still writing the end of that record's HTTP
// chunk, and the failed write counted as a cut-off.
func TestHundredViewersAndOneStalled(t *testing.T) {
	cfg := monitor.DefaultConfig("")
	cfg.BufferPerJob, cfg.ViewerMaxLag = 4000, 4000
	cfg.MaxFollowsPerUser = 200 // every viewer is the same user
	// The stalled viewer is cut off when a write to it has waited this
	// long; no write to a healthy viewer waits at all (see above).
	cfg.WriteTimeout = config.Duration(10 * time.Second)
	e := start(t, cfg, true)
	const viewers, total, batch = 100, 3000, 50

	// The stalled viewer asks and never reads.
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	fmt.Fprintf(conn, "GET /monitor/v1/jobs/%s/logs?follow=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n\r\n", jobA)

	// On every way out, the viewers and the producer are cancelled and
	// waited for. The deadline only bounds a failure: 100 viewers decoding
	// 3000 records each under -race take a minute on a loaded machine.
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	results := make([][]client.LogRecord, viewers)
	errs := make([]error, viewers)
	ready := make(chan struct{}, viewers)
	// Each healthy viewer sends on caughtUp when it has a whole batch, the
	// last one included, and then waits for release to hang up; one that
	// ends before it has every record closes failed.
	caughtUp := make(chan struct{}, viewers)
	release := make(chan struct{})
	failed := make(chan struct{})
	var failOnce sync.Once
	var vwg sync.WaitGroup
	for i := range viewers {
		vwg.Go(func() {
			o := client.LogOptions{Follow: true, MaxReconnects: -1}
			var got []client.LogRecord
			errs[i] = e.c.JobLogs(ctx, jobA, o, func(ev client.LogEvent) error {
				switch ev.Type {
				case client.LogMetaEvent:
					ready <- struct{}{}
				case client.LogRecordEvent:
					got = append(got, *ev.Record)
					if len(got)%batch == 0 {
						caughtUp <- struct{}{}
					}
					if len(got) == total {
						select {
						case <-release:
							return io.EOF
						case <-ctx.Done():
							return ctx.Err()
						}
					}
				case client.LogCutoffEvent:
					return errors.New("cut off: " + ev.Message)
				}
				return nil
			})
			results[i] = got
			if !errors.Is(errs[i], io.EOF) {
				failOnce.Do(func() { close(failed) })
			}
		})
	}
	wg.Go(vwg.Wait)
	// fail reports the first viewer's own failure, not the others'
	// cancellation.
	fail := func() {
		t.Helper()
		cancel()
		vwg.Wait()
		for _, canceled := range []bool{false, true} {
			for i := range viewers {
				if !errors.Is(errs[i], io.EOF) && errors.Is(errs[i], context.Canceled) == canceled {
					t.Fatalf("viewer %d: %v", i, errs[i])
				}
			}
		}
	}
	for range viewers {
		select {
		case <-ready:
		case <-failed:
			fail()
		}
	}

	// The producer runs beside the wait for the stalled viewer's cut-off.
	var slowest time.Duration
	produced := make(chan error, 1)
	wg.Go(func() {
		for i := 0; i < total; i += batch {
			var rs []joblog.Record
			for k := i; k < i+batch; k++ {
				rs = append(rs, rec(k))
			}
			t0 := time.Now()
			if _, err := e.m.Append(ctx, rs); err != nil {
				produced <- err
				return
			}
			slowest = max(slowest, time.Since(t0))
			for range viewers {
				select {
				case <-caughtUp:
				case <-failed:
					produced <- nil
					return
				}
			}
		}
		produced <- nil
	})

	// The stalled viewer is cut off once a write to it has waited
	// WriteTimeout. Wait for that before reading its connection: reading
	// would un-stall it. Its socket's window has been shut since it
	// stalled, and the kernel probes it at a growing interval: read soon
	// after the cut-off, not once the healthy viewers are done, so that
	// the interval is still short. The cut-off comes WriteTimeout after
	// the stall, half of waittest.Timeout: the bound is one of its own.
	waittest.Within(t, time.Minute, func() bool { return metric(t, e.m, "cosmicac_monitor_viewers_cut_off_total") >= 1 }, "the stalled viewer's cut-off")
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Fatalf("stalled viewer: want its stream closed, got %v", err)
	}

	// Every healthy viewer has every record and holds its stream open.
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	select {
	case <-failed:
		fail()
	default:
	}
	if n := metric(t, e.m, "cosmicac_monitor_viewers_cut_off_total"); n != 1 {
		t.Errorf("viewers cut off: %v, want 1", n)
	}
	// A viewer may have read a record before the monitor counted it.
	waittest.Until(t, func() bool { return metric(t, e.m, "cosmicac_monitor_records_delivered_total") >= viewers*total },
		"the monitor to count %d records delivered", viewers*total)
	close(release)
	vwg.Wait()
	for i := range viewers {
		if !errors.Is(errs[i], io.EOF) {
			t.Fatalf("viewer %d: %v", i, errs[i])
		}
		checkRun(t, results[i], 0, total)
	}
	t.Logf("slowest append of %d records: %v", batch, slowest)
}

// metric sums every series of a counter or gauge.
func metric(t testing.TB, m *monitor.Monitor, name string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, x := range mf.GetMetric() {
			sum += x.GetCounter().GetValue() + x.GetGauge().GetValue()
		}
	}
	return sum
}

func TestResumeWithLastEventID(t *testing.T) {
	e := start(t, monitor.DefaultConfig(""), false)
	appendN(t, e.m, 0, 100, 7)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first, _, err := collect(ctx, e.c, client.LogOptions{Follow: true}, 50)
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, first, 0, 50)
	appendN(t, e.m, 100, 250, 9)
	rest, _, err := collect(ctx, e.c, client.LogOptions{After: first[49].Seq}, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, rest, 50, 200)

	// The raw protocol: Last-Event-ID header, ids in order, an end event.
	req, _ := http.NewRequest("GET", e.srv.URL+"/monitor/v1/jobs/"+jobA+"/logs", nil)
	req.Header.Set("Last-Event-ID", strconv.FormatUint(rest[197].Seq, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if got := resp.Header.Get(monitor.HistoryHeader); got != monitor.HistoryBufferOnly {
		t.Errorf("%s: %q, want %q", monitor.HistoryHeader, got, monitor.HistoryBufferOnly)
	}
	want := fmt.Sprintf("id: %d\nevent: record\n", rest[198].Seq)
	if !strings.Contains(string(body), want) || !strings.Contains(string(body), "event: end\n") ||
		strings.Contains(string(body), fmt.Sprintf("id: %d\n", rest[197].Seq)) {
		t.Errorf("resumed stream:\n%s", body)
	}
}

func TestFilters(t *testing.T) {
	e := start(t, monitor.DefaultConfig(""), false)
	var rs []joblog.Record
	for i := range 40 {
		r := rec(i)
		r.Replica = i % 2
		if i%4 == 0 {
			r.Source, r.Step, r.OK = joblog.SourceSystem, "boot", joblog.Bool(true)
		}
		rs = append(rs, r)
	}
	if _, err := e.m.Append(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	one := 1
	ctx := context.Background()
	got, _, err := collect(ctx, e.c, client.LogOptions{Replica: &one}, 0)
	if err != nil || len(got) != 20 {
		t.Fatalf("replica 1: %d records, %v", len(got), err)
	}
	got, _, err = collect(ctx, e.c, client.LogOptions{Source: joblog.SourceSystem}, 0)
	if err != nil || len(got) != 10 || got[0].Step != "boot" || got[0].OK == nil || !*got[0].OK {
		t.Fatalf("system: %d records %+v, %v", len(got), got, err)
	}
	_, _, err = collect(ctx, e.c, client.LogOptions{Source: "nope"}, 0)
	if client.StatusOf(err) != http.StatusBadRequest {
		t.Fatalf("bad source: %v, want a 400", err)
	}
}

// A job's first records are in its buffer, not "older than the buffer":
// without Loki its whole history is the buffer, and the answer does not
// say partial. (The buffer made for a batch once had its floor at the
// batch's last number, so history looked for the batch in Loki only,
// and missed records that Loki refused.)
func TestNewJobsFirstRecordsAreInTheBuffer(t *testing.T) {
	e := start(t, monitor.DefaultConfig(""), false)
	appendN(t, e.m, 0, 5, 5)
	recs, evs, err := collect(context.Background(), e.c, client.LogOptions{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, recs, 0, 5)
	if len(evs) == 0 || evs[0].Meta == nil || evs[0].Meta.Partial {
		t.Fatalf("first event %+v: want meta, not partial", evs)
	}
}

func TestBufferOnlySaysSo(t *testing.T) {
	cfg := monitor.DefaultConfig("")
	cfg.BufferPerJob, cfg.ViewerMaxLag = 10, 10
	e := start(t, cfg, false)
	appendN(t, e.m, 0, 25, 5)
	recs, evs, err := collect(context.Background(), e.c, client.LogOptions{Since: "1h"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, recs, 15, 10)
	if len(evs) == 0 || evs[0].Meta == nil || evs[0].Meta.History != monitor.HistoryBufferOnly || !evs[0].Meta.Partial {
		t.Fatalf("first event %+v: want meta saying buffer-only and partial", evs)
	}
}

func TestSlowViewerIsCutOffAndResumes(t *testing.T) {
	cfg := monitor.DefaultConfig("")
	cfg.BufferPerJob, cfg.ViewerMaxLag = 1000, 100
	e := start(t, cfg, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := 0
	var cutoffs int
	proceed := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		var last uint64
		done <- e.c.JobLogs(ctx, jobA, client.LogOptions{Follow: true}, func(ev client.LogEvent) error {
			switch ev.Type {
			case client.LogMetaEvent:
				if got == 0 && cutoffs == 0 {
					proceed <- struct{}{}
					<-proceed // stall until the producer is far ahead
				}
			case client.LogCutoffEvent:
				cutoffs++
			case client.LogRecordEvent:
				if ev.Record.Seq <= last || lineNo(ev.Record) != got {
					return fmt.Errorf("record %q after %d records", ev.Record.Line, got)
				}
				last = ev.Record.Seq
				got++
				if got == 600 {
					return io.EOF
				}
			}
			return nil
		})
	}()
	<-proceed
	appendN(t, e.m, 0, 500, 500) // 500 behind at once: more than ViewerMaxLag
	proceed <- struct{}{}
	// The rest comes once the viewer is cut off, so that it resumes to
	// records appended after its cut-off as well as before.
	waittest.Until(t, func() bool { return metric(t, e.m, "cosmicac_monitor_viewers_cut_off_total") >= 1 }, "the stalled viewer's cut-off")
	appendN(t, e.m, 500, 600, 50)
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if cutoffs == 0 {
		t.Fatal("the stalled viewer was never cut off")
	}
}

func TestCloseStreamsEndsFollowers(t *testing.T) {
	e := start(t, monitor.DefaultConfig(""), false)
	appendN(t, e.m, 0, 5, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := collect(ctx, e.c, client.LogOptions{Follow: true, MaxReconnects: -1}, 0)
		done <- err
	}()
	waittest.Until(t, func() bool { return metric(t, e.m, "cosmicac_monitor_viewers") > 0 }, "the follower's stream")
	e.m.CloseStreams()
	if err := <-done; err == nil || ctx.Err() != nil {
		t.Fatalf("follower: %v (want its stream ended by CloseStreams)", err)
	}
}

// TestUnknownPathsAreJSON404: the monitor's handler serves the logs and
// nothing else; /monitor/metrics (now on the metrics listener) is a JSON
// 404 like every other path.
func TestUnknownPathsAreJSON404(t *testing.T) {
	e := start(t, monitor.DefaultConfig(""), false)
	for _, path := range []string{"/monitor/metrics", "/metrics", "/monitor/v1/nope"} {
		resp, err := http.Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(b), `"not_found"`) {
			t.Errorf("GET %s: %d %s %s, want a JSON 404", path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
	}
}

// TestRunServesItsListener: what the standalone wrk-monitor runs. Run
// serves the API on its listener until its context ends; a follower's
// stream ends at shutdown instead of holding it, and Run returns only once
// the server has stopped. A monitor given no viewers' authorizer refuses
// every viewer.
func TestRunServesItsListener(t *testing.T) {
	for _, tc := range []struct {
		name    string
		viewers monitor.Authorizer
		want    int
	}{{"viewers", allowAll, http.StatusOK}, {"no viewers", nil, http.StatusForbidden}} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := monitor.New(monitor.DefaultConfig(""), monitor.Deps{Viewers: tc.viewers})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			appendN(t, m, 0, 3, 3)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			url := "http://" + ln.Addr().String()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ran := make(chan error, 1)
			go func() { ran <- m.Run(ctx, ln) }()
			resp, err := http.Get(url + monitor.LogsPath + jobA + "/logs")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("GET logs: %d, want %d", resp.StatusCode, tc.want)
			}
			followed := make(chan error, 1)
			if tc.viewers != nil {
				go func() {
					_, _, err := collect(context.Background(), client.New(url, "tok"), client.LogOptions{Follow: true, MaxReconnects: -1}, 0)
					followed <- err
				}()
				waittest.Until(t, func() bool { return metric(t, m, "cosmicac_monitor_viewers") > 0 }, "the follower's stream")
			}
			cancel()
			if err := <-ran; err != nil {
				t.Fatalf("Run: %v", err)
			}
			if tc.viewers != nil {
				if err := <-followed; err == nil {
					t.Fatal("the follower's stream outlived the monitor")
				}
			}
			if _, err := http.Get(url + monitor.LogsPath + jobA + "/logs"); err == nil {
				t.Fatal("the monitor still answers after Run returned")
			}
		})
	}
}
