package inferproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/cosmicac/cosmicac/internal/store"
)

// TestUsageOf: the usage of each kind of answer, as the engines write it
// (chat and completions, embeddings without completion tokens, the
// Responses API's input and output tokens, nested in its stream's last
// event); null or absent usage is none.
func TestUsageOf(t *testing.T) {
	for _, tc := range []struct {
		body string
		want tokens
		ok   bool
	}{
		{`{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}`, tokens{12, 5}, true},
		{`{"data":[{"embedding":[0.1]}],"usage":{"prompt_tokens":7,"total_tokens":7}}`, tokens{7, 0}, true},
		{`{"output":[],"usage":{"input_tokens":30,"output_tokens":4,"total_tokens":34}}`, tokens{30, 4}, true},
		{`{"type":"response.completed","response":{"usage":{"input_tokens":3,"output_tokens":2}}}`, tokens{3, 2}, true},
		{`{"choices":[{"delta":{"content":"usage"}}],"usage":null}`, tokens{}, false},
		{`{"choices":[{"delta":{"content":"\"usage\":{\"prompt_tokens\":99}"}}]}`, tokens{}, false},
		{`{"usage":{"prompt_tokens":-4,"completion_tokens":2}}`, tokens{0, 2}, true},
	} {
		got, ok := usageOf([]byte(tc.body))
		if got != tc.want || ok != tc.ok {
			t.Errorf("usageOf(%s) = %+v, %v; want %+v, %v", tc.body, got, ok, tc.want, tc.ok)
		}
	}
}

// TestAnswerTapLongAnswer: an answer longer than the tap keeps (a large
// batch of embeddings) is written through whole, and its usage is read
// from its tail; a usage-looking string in the answer's text is not it.
func TestAnswerTapLongAnswer(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"object":"list","data":[`)
	for i := range 20000 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"index":%d,"embedding":[0.25,0.5,-0.75]}`, i)
	}
	b.WriteString(`],"model":"m","note":"\"usage\": {\"prompt_tokens\": 1}","usage":{"prompt_tokens":20000,"total_tokens":20000}}`)
	body := b.String()
	var out bytes.Buffer
	tap := newAnswerTap(&out)
	for s := body; len(s) > 0; {
		n := min(len(s), 32<<10)
		tap.Write([]byte(s[:n]))
		s = s[n:]
	}
	if out.String() != body {
		t.Fatal("the answer was not written through whole")
	}
	if got, ok := tap.usage(); !ok || got != (tokens{prompt: 20000}) {
		t.Errorf("usage of a %d-byte answer: %+v, %v", len(body), got, ok)
	}
	short := newAnswerTap(&out)
	short.Write([]byte(`{"usage":{"prompt_tokens":3,"completion_tokens":1}}`))
	if got, ok := short.usage(); !ok || got != (tokens{3, 1}) {
		t.Errorf("usage of a short answer: %+v, %v", got, ok)
	}
}

// TestWithUsage: a stream is asked for its usage unless it asked itself;
// other stream options are kept; the body stays one valid JSON object.
func TestWithUsage(t *testing.T) {
	for _, tc := range []struct {
		in      string
		changed bool
		want    string // stream_options after
	}{
		{`{"model":"m","stream":true}`, true, `{"include_usage":true}`},
		{`{}`, true, `{"include_usage":true}`},
		{` {"model":"m","stream_options":null}`, true, `{"include_usage":true}`},
		{`{"model":"m","stream_options":{"continuous_usage_stats":true}}`, true, `{"continuous_usage_stats":true,"include_usage":true}`},
		{`{"model":"m","stream_options":{"include_usage":false}}`, true, `{"include_usage":true}`},
		{`{"model":"m","stream_options":{"include_usage":true}}`, false, `{"include_usage":true}`},
		{`{"model":"m","stream_options":"x"}`, false, `"x"`},
	} {
		out, changed := withUsage([]byte(tc.in))
		if changed != tc.changed || !gjson.ValidBytes(out) || gjson.GetBytes(out, "stream_options").Raw != tc.want {
			t.Errorf("withUsage(%s) = %s, %v; want stream_options %s, changed %v", tc.in, out, changed, tc.want, tc.changed)
		}
		if m := gjson.GetBytes(out, "model"); strings.Contains(tc.in, `"model"`) && m.String() != "m" {
			t.Errorf("withUsage(%s) lost the model: %s", tc.in, out)
		}
	}
}

// TestCopySSEMetersAndStrips: a stream's usage is read from its events;
// the usage-only last chunk is dropped when the proxy asked for it, and
// passed on when the client did; nothing else changes.
func TestCopySSEMetersAndStrips(t *testing.T) {
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n\n" +
		"data: [DONE]\n\n"
	for _, strip := range []bool{false, true} {
		rec := httptest.NewRecorder()
		m := meter{strip: strip}
		if err := copySSE(rec, rec, strings.NewReader(stream[10:]), []byte(stream[:10]), 10, nil, &m); err != nil {
			t.Fatal(err)
		}
		want := stream
		if strip {
			want = strings.Replace(stream, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n\n", "", 1)
		}
		if rec.Body.String() != want || m.tokens != (tokens{9, 2}) {
			t.Errorf("strip %v: wrote %q, metered %+v", strip, rec.Body.String(), m.tokens)
		}
	}
}

// fakeSink records batches, failing while fail is set.
type fakeSink struct {
	mu      sync.Mutex
	fail    bool
	batches map[string][]store.UsageRow
	calls   int
}

func (f *fakeSink) RecordUsage(_ context.Context, batch string, rows []store.UsageRow) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail {
		return errors.New("the app-node is away")
	}
	if f.batches == nil {
		f.batches = map[string][]store.UsageRow{}
	}
	f.batches[batch] = append([]store.UsageRow(nil), rows...)
	return nil
}

func (f *fakeSink) total() (req, p, c int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, rows := range f.batches {
		for _, r := range rows {
			req, p, c = req+r.Requests, p+r.PromptTokens, c+r.CompletionTokens
		}
	}
	return
}

// TestUsageBookDelivers: requests sum by the minute, caller and model;
// a batch the sink refused is kept and delivered with the same ID later
// (so the store counts it once), in order; the book empties.
func TestUsageBookDelivers(t *testing.T) {
	b := newUsageBook(slog.New(slog.DiscardHandler))
	now := time.Date(2026, 12, 6, 10, 0, 30, 0, time.UTC)
	b.add(now, "ml", "k1", "j1", "@ml/chat", tokens{10, 2})
	b.add(now.Add(10*time.Second), "ml", "k1", "j1", "@ml/chat", tokens{5, 1})
	b.add(now.Add(40*time.Second), "ml", "k1", "j1", "@ml/chat", tokens{1, 1}) // the next minute
	b.add(now, "web", "k2", "j1", "@ml/chat", tokens{3, 3})
	sink := &fakeSink{fail: true}
	b.cut()
	if err := b.deliver(context.Background(), sink); err == nil {
		t.Fatal("deliver to a failing sink: no error")
	}
	b.add(now.Add(time.Minute), "ml", "k1", "j1", "@ml/chat", tokens{100, 0})
	b.cut()
	if len(b.pending) != 2 || b.held != 4 {
		t.Fatalf("pending %d batches, %d rows; want 2 and 4", len(b.pending), b.held)
	}
	first := b.pending[0].id
	sink.fail = false
	if err := b.deliver(context.Background(), sink); err != nil {
		t.Fatal(err)
	}
	if _, ok := sink.batches[first]; !ok || len(b.pending) != 0 || b.held != 0 {
		t.Errorf("after delivery: batches %v, pending %d", sink.batches, len(b.pending))
	}
	if req, p, c := sink.total(); req != 5 || p != 119 || c != 7 {
		t.Errorf("delivered %d requests, %d prompt and %d completion tokens; want 5, 119, 7", req, p, c)
	}
	for _, r := range sink.batches[first] {
		if r.Start.Second() != 0 || r.Start.Location() != time.UTC {
			t.Errorf("row %+v does not start at a minute, in UTC", r)
		}
	}
}

// BenchmarkMeterStream: a streamed answer of 256 chunks and a usage chunk
// through copySSE, reading its usage (and dropping that chunk); "plain"
// is the same copy with no event carrying usage, the cost of the copy
// alone.
func BenchmarkMeterStream(b *testing.B) {
	var s strings.Builder
	for i := range 256 {
		fmt.Fprintf(&s, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"}}]}\n\n", i)
	}
	plain := s.String() + "data: [DONE]\n\n"
	metered := s.String() + "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":812,\"completion_tokens\":256}}\n\ndata: [DONE]\n\n"
	for _, c := range []struct{ name, stream string }{{"plain", plain}, {"metered", metered}} {
		b.Run(c.name, func(b *testing.B) {
			buf := make([]byte, 32<<10)
			b.SetBytes(int64(len(c.stream)))
			b.ReportAllocs()
			for b.Loop() {
				m := meter{strip: true}
				rec := discardFlusher{}
				if err := copySSE(rec, rec, strings.NewReader(c.stream), buf, 0, nil, &m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMeterAnswer: a 64 KiB JSON answer written through the tap and
// its usage read, against io.Copy of it to the same writer.
func BenchmarkMeterAnswer(b *testing.B) {
	var s strings.Builder
	s.WriteString(`{"object":"list","data":[`)
	for i := 0; s.Len() < 64<<10; i++ {
		fmt.Fprintf(&s, `{"index":%d,"embedding":[0.25,0.5,-0.75,0.125]},`, i)
	}
	body := strings.TrimSuffix(s.String(), ",") + `],"usage":{"prompt_tokens":900,"total_tokens":900}}`
	buf := make([]byte, 32<<10)
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			io.CopyBuffer(discardFlusher{}, struct{ io.Reader }{strings.NewReader(body)}, buf)
		}
	})
	b.Run("metered", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			tap := newAnswerTap(discardFlusher{})
			io.CopyBuffer(tap, struct{ io.Reader }{strings.NewReader(body)}, buf)
			if _, ok := tap.usage(); !ok {
				b.Fatal("no usage")
			}
			tap.release()
		}
	})
}

type discardFlusher struct{}

func (discardFlusher) Write(p []byte) (int, error) { return len(p), nil }
func (discardFlusher) Flush()                      {}
