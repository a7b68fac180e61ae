package monitor_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/monitor"
	"github.com/cosmicac/cosmicac/internal/monitor/lokitest"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// Fan-out benchmarks: producers (joblog.Forwarder over the fabric) emit
// records of one job; 100 SSE viewers on loopback read them. Each record's
// line carries its emit time, so a viewer measures emit-to-read latency.
// The baseline streams the same frames to 100 viewers from a plain HTTP
// handler fed by per-viewer Go channels: no fabric, no monitor.
//
//	go test -run '^$' -bench Fanout -benchtime 1x ./internal/monitor/

const (
	benchViewers   = 100
	benchProducers = 2
)

// benchRecords and benchRate: records per run, and the producers' total
// rate (records/s; 0: as fast as they go).
var fanoutCases = []struct {
	name    string
	records int
	rate    int
}{
	{"paced5k", 20000, 5000},
	{"paced10k", 40000, 10000},
	{"unpaced", 40000, 0},
}

type viewerStats struct {
	n   int
	lat []time.Duration
	err error
}

// readViewer reads SSE frames from url until want records came.
func readViewer(ctx context.Context, url string, want int, ready chan<- struct{}) viewerStats {
	var st viewerStats
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		st.err = err
		ready <- struct{}{}
		return st
	}
	defer resp.Body.Close()
	ready <- struct{}{}
	br := bufio.NewReaderSize(resp.Body, 256<<10)
	marker := []byte(`"line":"t=`)
	st.lat = make([]time.Duration, 0, want)
	for st.n < want {
		line, err := br.ReadSlice('\n')
		if err != nil {
			st.err = fmt.Errorf("after %d records: %w", st.n, err)
			return st
		}
		if !bytes.HasPrefix(line, []byte("data: ")) {
			if bytes.HasPrefix(line, []byte("event: cutoff")) {
				st.err = fmt.Errorf("cut off after %d records", st.n)
				return st
			}
			continue
		}
		i := bytes.Index(line, marker)
		if i < 0 {
			continue
		}
		rest := line[i+len(marker):]
		j := bytes.IndexByte(rest, '"')
		ns, _ := strconv.ParseInt(string(rest[:j]), 10, 64)
		st.lat = append(st.lat, time.Duration(time.Now().UnixNano()-ns))
		st.n++
	}
	return st
}

func report(b *testing.B, elapsed time.Duration, stats []viewerStats, records int) {
	var all []time.Duration
	total := 0
	for i, s := range stats {
		if s.err != nil {
			b.Fatalf("viewer %d: %v", i, s.err)
		}
		total += s.n
		all = append(all, s.lat...)
	}
	slices.Sort(all)
	p := func(q float64) float64 { return float64(all[int(q*float64(len(all)-1))]) / 1e6 }
	b.ReportMetric(float64(total)/elapsed.Seconds(), "deliveries/s")
	b.ReportMetric(float64(records)/elapsed.Seconds(), "records/s")
	b.ReportMetric(p(0.5), "p50-ms")
	b.ReportMetric(p(0.99), "p99-ms")
	b.ReportMetric(p(1), "max-ms")
}

// produce emits records at rate across emit functions, each line "t=NS".
func produce(records, rate int, emit []func(joblog.Record)) {
	var wg sync.WaitGroup
	per := records / len(emit)
	for p, fn := range emit {
		wg.Go(func() {
			start := time.Now()
			for i := range per {
				if rate > 0 && i%50 == 0 {
					due := start.Add(time.Duration(float64(i) / (float64(rate) / float64(len(emit))) * float64(time.Second)))
					if d := time.Until(due); d > 0 {
						time.Sleep(d)
					}
				}
				now := time.Now()
				fn(joblog.Record{Time: now, JobID: jobA, Replica: p, Source: joblog.SourceApplication, Stream: "stdout",
					Line: "t=" + strconv.FormatInt(now.UnixNano(), 10)})
			}
		})
	}
	wg.Wait()
}

func BenchmarkFanout100Viewers(b *testing.B) {
	for _, tc := range fanoutCases {
		b.Run("monitor/"+tc.name, func(b *testing.B) {
			for range b.N {
				benchMonitor(b, tc.records, tc.rate)
			}
		})
		b.Run("baseline/"+tc.name, func(b *testing.B) {
			for range b.N {
				benchBaseline(b, tc.records, tc.rate)
			}
		})
	}
}

func benchMonitor(b *testing.B, records, rate int) {
	cfg := monitor.DefaultConfig("")
	cfg.BufferPerJob, cfg.ViewerMaxLag = 100000, 100000
	cfg.BufferBytesPerJob, cfg.BufferBytes = 1<<30, 1<<30 // records, not bytes, bound this buffer
	cfg.MaxFollowsPerUser = benchViewers                  // every viewer is the same user
	e := start(b, cfg, false)
	defer e.stop()
	allow := fabric.NewAllowList()
	mid, _ := fabric.GenerateIdentity()
	mon, err := fabric.New(fabric.Config{Component: "wrk-monitor", Identity: mid, Listen: "127.0.0.1:0", Policy: allow})
	if err != nil {
		b.Fatal(err)
	}
	defer mon.Close()
	e.m.Serve(mon, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var emit []func(joblog.Record)
	var fwds []*joblog.Forwarder
	for range benchProducers {
		id, _ := fabric.GenerateIdentity()
		n, err := fabric.New(fabric.Config{Component: "agent", Identity: id})
		if err != nil {
			b.Fatal(err)
		}
		defer n.Close()
		allow.Allow(n.PublicKey())
		n.AddAddrs(mon.PublicKey(), mon.Addr())
		f := joblog.NewForwarder(n, mon.PublicKey(), 1<<20)
		go f.Run(ctx)
		fwds = append(fwds, f)
		emit = append(emit, f.Emit)
	}
	url := e.srv.URL + "/monitor/v1/jobs/" + jobA + "/logs?follow=true"
	stats := make([]viewerStats, benchViewers)
	ready := make(chan struct{}, benchViewers)
	var wg sync.WaitGroup
	want := records / benchProducers * benchProducers
	for i := range benchViewers {
		wg.Go(func() { stats[i] = readViewer(ctx, url, want, ready) })
	}
	// A viewer is ready once it has the response's header, which the
	// monitor sends only after it has subscribed the viewer.
	for range benchViewers {
		<-ready
	}
	b.ResetTimer()
	t0 := time.Now()
	produce(records, rate, emit)
	wg.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	for _, f := range fwds {
		if s := f.Stats(); s.Dropped > 0 {
			b.Fatalf("forwarder dropped %d", s.Dropped)
		}
	}
	report(b, elapsed, stats, want)
}

// benchBaseline: the same frames and viewers, from per-viewer channels.
func benchBaseline(b *testing.B, records, rate int) {
	var mu sync.Mutex
	var subs []chan []byte
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ch := make(chan []byte, 1<<16)
		mu.Lock()
		subs = append(subs, ch)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		bw := bufio.NewWriterSize(w, 32<<10)
		rc := http.NewResponseController(w)
		bw.Flush()
		rc.Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case f := <-ch:
				bw.Write(f)
				for more := true; more; {
					select {
					case f := <-ch:
						bw.Write(f)
					default:
						more = false
					}
				}
				bw.Flush()
				rc.Flush()
			}
		}
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer srv.CloseClientConnections()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stats := make([]viewerStats, benchViewers)
	ready := make(chan struct{}, benchViewers)
	var wg sync.WaitGroup
	want := records / benchProducers * benchProducers
	for i := range benchViewers {
		wg.Go(func() { stats[i] = readViewer(ctx, srv.URL, want, ready) })
	}
	// A viewer is ready once it has the response's header, which the
	// handler sends only after it has subscribed the viewer.
	for range benchViewers {
		<-ready
	}
	var seq uint64
	var pmu sync.Mutex
	emit := func(r joblog.Record) {
		pmu.Lock()
		defer pmu.Unlock()
		seq++
		body := fmt.Appendf(nil, `{"seq":%d,"time":%q,"job":%q,"replica":%d,"source":"application","stream":"stdout","line":%q}`,
			seq, r.Time.Format(time.RFC3339Nano), r.JobID, r.Replica, r.Line)
		frame := fmt.Appendf(nil, "id: %d\nevent: record\ndata: %s\n\n", seq, body)
		mu.Lock()
		for _, ch := range subs {
			ch <- frame
		}
		mu.Unlock()
	}
	b.ResetTimer()
	t0 := time.Now()
	produce(records, rate, []func(joblog.Record){emit, emit})
	wg.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	report(b, elapsed, stats, want)
}

// Loki forwarding: the monitor drains a spool of records into the test
// server; the baseline posts the same batches (encoded and compressed the
// same way) from a plain HTTP client, one after another. MiB are the
// uncompressed protobuf bytes of the batches.
//
//	go test -run '^$' -bench LokiForward -benchtime 1x ./internal/monitor/
func BenchmarkLokiForward(b *testing.B) {
	const records, batch = 200000, 5000
	recs := make([]joblog.Record, records)
	for i := range recs {
		recs[i] = joblog.Record{Time: time.Now(), JobID: jobA, Team: "ml", Replica: i % 4, Source: joblog.SourceApplication, Stream: "stdout",
			Line: fmt.Sprintf("step %d loss=%.4f lr=0.0003 tokens/s=%d", i, 1/float64(i+1), 1000+i%977)}
	}
	b.Run("monitor", func(b *testing.B) {
		for range b.N {
			lk := lokitest.New()
			cfg := lokiConfig(b, lk, b.TempDir())
			cfg.Loki.BatchRecords, cfg.Loki.BatchBytes = batch, 64<<20
			cfg.Loki.MaxBackoff = config.Duration(5 * time.Millisecond)
			lk.FailNext(1_000_000, 503, "") // fill the spool first
			e := start(b, cfg, false)
			for i := 0; i < records; i += 1000 {
				if _, err := e.m.Append(context.Background(), recs[i:i+1000]); err != nil {
					b.Fatal(err)
				}
			}
			var raw int
			for i := 0; i < records; i += batch {
				es := make([]monitor.Entry, batch)
				for k := range es {
					es[k] = monitor.Entry{Seq: uint64(i + k + 1), Record: recs[i+k]}
				}
				raw += len(monitor.EncodePushProto(es))
			}
			b.ResetTimer()
			t0 := time.Now()
			lk.Heal()
			waitLoki(b, lk, records)
			el := time.Since(t0)
			b.StopTimer()
			_, _, wire := lk.Stats()
			b.ReportMetric(float64(raw)/(1<<20)/el.Seconds(), "MiB/s")
			b.ReportMetric(float64(records)/el.Seconds(), "records/s")
			b.ReportMetric(float64(raw)/float64(wire), "compression")
			e.stop()
			lk.Close()
		}
	})
	b.Run("baseline", func(b *testing.B) {
		for range b.N {
			lk := lokitest.New()
			hc := &http.Client{}
			var raw int
			b.ResetTimer()
			t0 := time.Now()
			for i := 0; i < records; i += batch {
				es := make([]monitor.Entry, batch)
				for k := range es {
					es[k] = monitor.Entry{Seq: uint64(i + k + 1), Record: recs[i+k]}
				}
				pb := monitor.EncodePushProto(es)
				raw += len(pb)
				req, _ := http.NewRequest("POST", lk.URL+"/loki/api/v1/push", bytes.NewReader(snappy.Encode(nil, pb)))
				req.Header.Set("Content-Type", "application/x-protobuf")
				resp, err := hc.Do(req)
				if err != nil || resp.StatusCode != 204 {
					b.Fatalf("push: %v", err)
				}
				resp.Body.Close()
			}
			el := time.Since(t0)
			b.StopTimer()
			b.ReportMetric(float64(raw)/(1<<20)/el.Seconds(), "MiB/s")
			b.ReportMetric(float64(records)/el.Seconds(), "records/s")
			lk.Close()
		}
	})
}

// BenchmarkLokiDrainReal: the drain of BenchmarkLokiForward against a real
// Loki (lokitest.Start; skipped without one), its ingestion rate limits
// raised so that they do not pace it. A monitor spools the records while
// Loki is unreachable; a second one on the same spool drains it. The
// baseline posts the same batches from a plain client, under another job
// (so that Loki does not take them as duplicates), in the same run.
//
//	COSMICAC_LOKI_BIN=… go test -run '^$' -bench LokiDrainReal -benchtime 1x ./internal/monitor/
func BenchmarkLokiDrainReal(b *testing.B) {
	const records, batch = 200000, 5000
	lk := lokitest.Start(b, "ingestion_rate_mb: 4096", "ingestion_burst_size_mb: 4096",
		"per_stream_rate_limit: 4GB", "per_stream_rate_limit_burst: 4GB")
	recs := make([]joblog.Record, records)
	for i := range recs {
		recs[i] = joblog.Record{Time: time.Now(), JobID: jobA, Team: "ml", Replica: i % 4, Source: joblog.SourceApplication, Stream: "stdout",
			Line: fmt.Sprintf("step %d loss=%.4f lr=0.0003 tokens/s=%d", i, 1/float64(i+1), 1000+i%977)}
	}
	b.Run("monitor", func(b *testing.B) {
		for range b.N {
			dir := b.TempDir()
			away := monitor.DefaultConfig(dir)
			away.Loki.URL = "http://127.0.0.1:1"
			away.Loki.MinBackoff = config.Duration(time.Hour)
			m, err := monitor.New(away, monitor.Deps{})
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < records; i += 1000 {
				if _, err := m.Append(context.Background(), recs[i:i+1000]); err != nil {
					b.Fatal(err)
				}
			}
			m.Close()
			cfg := monitor.DefaultConfig(dir)
			cfg.Loki.URL = lk.URL
			cfg.Loki.BatchRecords, cfg.Loki.BatchBytes = batch, 64<<20
			b.ResetTimer()
			t0 := time.Now()
			e := start(b, cfg, false)
			waittest.Until(b, func() bool { return metric(b, e.m, "cosmicac_monitor_loki_records_sent_total") >= records }, "the drain")
			el := time.Since(t0)
			b.StopTimer()
			b.ReportMetric(float64(records)/el.Seconds(), "records/s")
			if n := metric(b, e.m, "cosmicac_monitor_loki_push_errors_total"); n > 0 {
				b.Errorf("%v failed pushes", n)
			}
			e.stop()
		}
	})
	b.Run("baseline", func(b *testing.B) {
		for n := range b.N {
			hc := &http.Client{}
			job := fmt.Sprintf("00000000-0000-4000-8000-%012d", 100+n)
			b.ResetTimer()
			t0 := time.Now()
			seq0 := uint64(t0.UnixNano())
			for i := 0; i < records; i += batch {
				es := make([]monitor.Entry, batch)
				for k := range es {
					r := recs[i+k]
					r.JobID = job
					es[k] = monitor.Entry{Seq: seq0 + uint64(i+k), Record: r}
				}
				req, _ := http.NewRequest("POST", lk.URL+"/loki/api/v1/push", bytes.NewReader(snappy.Encode(nil, monitor.EncodePushProto(es))))
				req.Header.Set("Content-Type", "application/x-protobuf")
				resp, err := hc.Do(req)
				if err != nil {
					b.Fatalf("push: %v", err)
				}
				resp.Body.Close()
				if resp.StatusCode != 204 {
					b.Fatalf("push: %s", resp.Status)
				}
			}
			el := time.Since(t0)
			b.StopTimer()
			b.ReportMetric(float64(records)/el.Seconds(), "records/s")
		}
	})
}
