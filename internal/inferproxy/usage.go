package inferproxy

// Metering: the tokens of each answer, as its engine counted them (its
// usage), summed by the minute, caller and model, and delivered in batches
// to the store (docs/inference.md, "Metering").

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/cosmicac/cosmicac/internal/store"
)

// UsageSink keeps the usage the proxy measures: the store, in the
// app-node's process, or the app-node over the fabric (FabricUsage). A
// batch delivered twice (a retry after a lost answer) must count once.
type UsageSink interface {
	RecordUsage(ctx context.Context, batch string, rows []store.UsageRow) error
}

// tokens are an answer's usage: the prompt's tokens and the completion's,
// as the engine counted them.
type tokens struct {
	prompt, completion int64
}

// meter is what try learned of an answer for metering.
type meter struct {
	status int
	tokens tokens
	// strip drops a stream's usage-only last chunk, which the proxy asked
	// for (withUsage), not the client.
	strip bool
}

// usageOf reads the usage of an answer, or of one event of a stream: the
// top-level "usage" object (chat, completions, embeddings: prompt_tokens
// and completion_tokens), or the Responses API's "response.usage"
// (input_tokens, output_tokens). A usage of null or absent is not one.
func usageOf(b []byte) (tokens, bool) {
	s := unsafe.String(unsafe.SliceData(b), len(b)) // read only here
	u := gjson.Get(s, "usage")
	if !u.IsObject() {
		if u = gjson.Get(s, "response.usage"); !u.IsObject() {
			return tokens{}, false
		}
	}
	var t tokens
	if v := u.Get("prompt_tokens"); v.Exists() {
		t.prompt = v.Int()
	} else {
		t.prompt = u.Get("input_tokens").Int()
	}
	if v := u.Get("completion_tokens"); v.Exists() {
		t.completion = v.Int()
	} else {
		t.completion = u.Get("output_tokens").Int()
	}
	return tokens{prompt: max(t.prompt, 0), completion: max(t.completion, 0)}, true
}

var usageKey = []byte(`"usage"`)

// sseUsage reads the usage of one event of a stream (its data lines), and
// whether the event is a usage-only chunk (its choices empty: what
// stream_options.include_usage adds at the end).
func sseUsage(ev []byte) (t tokens, usageOnly, ok bool) {
	if !bytes.Contains(ev, usageKey) {
		return tokens{}, false, false
	}
	for line := range bytes.Lines(ev) {
		data, found := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:"))
		if !found {
			continue
		}
		data = bytes.TrimSpace(data)
		if t, ok = usageOf(data); ok {
			ch := gjson.GetBytes(data, "choices")
			return t, ch.IsArray() && len(ch.Array()) == 0, true
		}
	}
	return tokens{}, false, false
}

// answerTap writes an answer through and keeps its last tapTail bytes,
// where every engine writes its usage (after the choices or the
// embeddings; at most small fields follow it: an ID, llama.cpp's timings).
// An answer is never held: a 64 KiB one costs about a copy of it
// (BenchmarkMeterAnswer).
type answerTap struct {
	w    io.Writer
	tail []byte // at most 2*tapTail, from tapBufs
}

const tapTail = 16 << 10

var tapBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2*tapTail); return &b }}

func newAnswerTap(w io.Writer) *answerTap {
	return &answerTap{w: w, tail: (*tapBufs.Get().(*[]byte))[:0]}
}

// release gives the tap's buffer back.
func (t *answerTap) release() {
	b := t.tail[:0]
	t.tail = nil
	tapBufs.Put(&b)
}

func (t *answerTap) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	switch {
	case len(p) >= tapTail:
		t.tail = append(t.tail[:0], p[len(p)-tapTail:]...)
	case len(t.tail)+len(p) > cap(t.tail):
		keep := tapTail - len(p)
		t.tail = append(t.tail[:0], t.tail[len(t.tail)-keep:]...)
		t.tail = append(t.tail, p...)
	default:
		t.tail = append(t.tail, p...)
	}
	return n, err
}

// usage is the answer's usage: its last "usage" key (a quote inside a
// string is escaped, so this is a key), decoded from its value on; or,
// the Responses API's, the same key inside its "response".
func (t *answerTap) usage() (tokens, bool) {
	b := t.tail
	for {
		i := bytes.LastIndex(b, usageKey)
		if i < 0 {
			return tokens{}, false
		}
		rest := bytes.TrimLeft(b[i+len(usageKey):], " \t\r\n")
		if len(rest) > 1 && rest[0] == ':' {
			if v := bytes.TrimLeft(rest[1:], " \t\r\n"); len(v) > 0 && v[0] == '{' {
				if t, ok := usageOf(slices.Concat([]byte(`{"usage":`), objectAt(v), []byte("}"))); ok {
					return t, true
				}
			}
		}
		b = b[:i]
	}
}

// objectAt is the JSON object v starts with (braces balanced outside
// strings), or v if it does not end.
func objectAt(v []byte) []byte {
	depth, inStr, esc := 0, false, false
	for i, c := range v {
		switch {
		case esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '{':
			depth++
		case c == '}':
			depth--
			if depth == 0 {
				return v[:i+1]
			}
		}
	}
	return v
}

// withUsage asks a streamed chat or completion for its usage at the end
// (stream_options.include_usage), when the client did not: the proxy
// meters every answer, and drops that last chunk again (meter.strip).
// It reports whether it changed body.
func withUsage(body []byte) ([]byte, bool) {
	so := gjson.GetBytes(body, "stream_options")
	if so.IsObject() {
		if iu := so.Get("include_usage"); iu.Exists() && iu.Type != gjson.False && iu.Type != gjson.Null {
			return body, false // asked for (vLLM: any include_usage but false)
		}
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(so.Raw), &m) != nil {
			return body, false
		}
		m["include_usage"] = json.RawMessage("true")
		v, _ := json.Marshal(m)
		return slices.Concat(body[:so.Index], v, body[so.Index+len(so.Raw):]), true
	}
	if so.Exists() {
		if so.Type != gjson.Null {
			return body, false // not an object: the engine refuses it, as it would
		}
		return slices.Concat(body[:so.Index], []byte(`{"include_usage":true}`), body[so.Index+len(so.Raw):]), true
	}
	i := bytes.IndexByte(body, '{')
	if i < 0 {
		return body, false
	}
	sep := ","
	if rest := bytes.TrimSpace(body[i+1:]); len(rest) > 0 && rest[0] == '}' {
		sep = ""
	}
	return slices.Concat(body[:i+1], []byte(`"stream_options":{"include_usage":true}`+sep), body[i+1:]), true
}

// usageRowKey is a row of the book: one minute of one caller's use of one
// job's model.
type usageRowKey struct {
	minute                int64
	team, key, job, model string
}

// usageBook sums the usage by the minute and delivers it in batches.
type usageBook struct {
	id  string // this proxy's run, in its batches' IDs
	log *slog.Logger

	mu      sync.Mutex
	rows    map[usageRowKey]*store.UsageRow
	seq     uint64
	pending []usageBatch // cut, not yet delivered, oldest first
	held    int          // rows in pending
	dropped int64
}

type usageBatch struct {
	id   string
	rows []store.UsageRow
}

// maxPendingUsage bounds the rows held for a sink that does not take them;
// the oldest batches go past it (counted and logged).
const maxPendingUsage = 200000

func newUsageBook(log *slog.Logger) *usageBook {
	b := make([]byte, 8)
	rand.Read(b)
	return &usageBook{id: hex.EncodeToString(b), log: log, rows: map[usageRowKey]*store.UsageRow{}}
}

// add counts one answered request.
func (b *usageBook) add(now time.Time, team, key, job, model string, t tokens) {
	k := usageRowKey{minute: now.Unix() / 60, team: team, key: key, job: job, model: model}
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.rows[k]
	if r == nil {
		r = &store.UsageRow{Start: time.Unix(k.minute*60, 0).UTC(), Team: team, KeyID: key, JobID: job, Model: model}
		b.rows[k] = r
	}
	r.Requests++
	r.PromptTokens += t.prompt
	r.CompletionTokens += t.completion
}

// cut moves the rows summed so far into a new pending batch.
func (b *usageBook) cut() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.rows) == 0 {
		return
	}
	rows := make([]store.UsageRow, 0, len(b.rows))
	for _, r := range b.rows {
		rows = append(rows, *r)
	}
	clear(b.rows)
	for len(rows) > 0 {
		n := min(len(rows), store.MaxUsageRows)
		b.seq++
		b.pending = append(b.pending, usageBatch{id: b.id + "-" + strconv.FormatUint(b.seq, 10), rows: rows[:n]})
		b.held += n
		rows = rows[n:]
	}
	for b.held > maxPendingUsage && len(b.pending) > 1 {
		b.held -= len(b.pending[0].rows)
		b.dropped += int64(len(b.pending[0].rows))
		b.log.Error("inference usage dropped: the usage store has not taken it", "rows", len(b.pending[0].rows), "batch", b.pending[0].id)
		b.pending = b.pending[1:]
	}
}

// deliver hands the pending batches to sink, oldest first, until one
// fails (it is kept, with those after it, for the next time).
func (b *usageBook) deliver(ctx context.Context, sink UsageSink) error {
	for {
		b.mu.Lock()
		if len(b.pending) == 0 {
			b.mu.Unlock()
			return nil
		}
		batch := b.pending[0]
		b.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := sink.RecordUsage(cctx, batch.id, batch.rows)
		cancel()
		if err != nil {
			return fmt.Errorf("deliver usage batch %s (%d rows): %w", batch.id, len(batch.rows), err)
		}
		b.mu.Lock()
		if len(b.pending) > 0 && b.pending[0].id == batch.id {
			b.pending = b.pending[1:]
			b.held -= len(batch.rows)
		}
		b.mu.Unlock()
	}
}

// run cuts and delivers every interval until ctx ends, then once more
// (within a few seconds), so that a proxy stopped loses nothing it
// measured.
func (b *usageBook) run(ctx context.Context, sink UsageSink, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			b.cut()
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := b.deliver(fctx, sink); err != nil {
				b.log.Error("inference usage not delivered at shutdown", "err", err)
			}
			cancel()
			return
		case <-t.C:
		}
		b.cut()
		if err := b.deliver(ctx, sink); err != nil {
			if !failing && ctx.Err() == nil {
				b.log.Warn("inference usage held for a retry", "err", err)
			}
			failing = true
		} else {
			failing = false
		}
	}
}

// meter counts one answered request of caller c to the job jobID (one of
// jobs): the team that pays is the key's, or without one the model's own.
func (p *Proxy) meter(c caller, jobs []Model, jobID string, t tokens) {
	i := slices.IndexFunc(jobs, func(m Model) bool { return m.JobID == jobID })
	if i < 0 {
		return
	}
	team := c.team
	if team == "" {
		team = jobs[i].Team
	}
	model := jobs[i].FullName()
	if c.tpm > 0 {
		p.limits.spendTokens(c.limit, c.tpm, t.prompt+t.completion, time.Now())
	}
	p.metrics.tokens.WithLabelValues(team, model, "prompt").Add(float64(t.prompt))
	p.metrics.tokens.WithLabelValues(team, model, "completion").Add(float64(t.completion))
	if p.sink != nil {
		p.usage.add(time.Now(), team, c.keyID, jobID, model, t)
	}
}
