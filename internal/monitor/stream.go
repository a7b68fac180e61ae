package monitor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/backoff"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/joblog"
)

// HTTP API (docs/logs.md):
//
//	GET /monitor/v1/jobs/{id}/logs?follow=true|false&since=DURATION|RFC3339
//	    &replica=N&source=system|application
//	    Last-Event-ID: SEQ (or ?lastEventId=SEQ)
//
// The answer is text/event-stream. Header X-Cosmicac-History is "loki" or
// "buffer-only". Events:
//
//	meta    first: {"history":"loki"|"buffer-only","follow":bool,"partial":bool}
//	record  id: SEQ, data: the record with "seq"
//	warning {"message":...}: history could not be read (the stream goes on)
//	cutoff  {"reason":"lagged","lastId":SEQ,"message":...}: the viewer fell
//	        too far behind; reconnect with Last-Event-ID: SEQ
//	end     {"lastId":SEQ}: without follow, everything asked for was sent
//
// A follow beyond the user's MaxFollowsPerUser open ones is answered 429
// (a JSON error, code too_many_requests).
const (
	HistoryHeader     = "X-Cosmicac-History"
	HistoryLoki       = "loki"
	HistoryBufferOnly = "buffer-only"
	// LogsPath is the route's prefix; the job ID and "/logs" follow.
	LogsPath = "/monitor/v1/jobs/"
)

// Meta is the first event of a stream.
type Meta struct {
	History string `json:"history"`
	Follow  bool   `json:"follow"`
	// Partial: history was asked for, there is no Loki, and records older
	// than the buffer may exist that the stream does not show.
	Partial bool `json:"partial"`
}

// Cutoff is the last event of a viewer that fell behind.
type Cutoff struct {
	Reason  string `json:"reason"`
	LastID  uint64 `json:"lastId"`
	Message string `json:"message"`
}

// Handler serves GET /monitor/v1/jobs/{id}/logs, authorizing each request
// with the monitor's Deps.Viewers; any other path is a JSON 404 (the
// metrics are not here: they are on the component's metrics listener).
func (m *Monitor) Handler() http.Handler {
	auth := m.viewers
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+LogsPath+"{id}/logs", func(w http.ResponseWriter, r *http.Request) { m.serveLogs(w, r, auth) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, apiv1.CodeNotFound, "no such route: "+r.Method+" "+r.URL.Path)
	})
	return mux
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(apiv1.ErrorResponse{Error: apiv1.ErrorBody{Code: code, Message: msg}})
}

// logsRequest is a parsed logs request.
type logsRequest struct {
	job      string
	follow   bool
	filter   Filter
	since    uint64 // first number wanted when hasSince
	hasSince bool
	after    uint64 // resume after this number when hasAfter
	hasAfter bool
}

func parseLogsRequest(r *http.Request, now time.Time) (logsRequest, error) {
	var lr logsRequest
	var errs []string
	id, err := cosmic.ParseJobID(r.PathValue("id"))
	if err != nil {
		errs = append(errs, err.Error())
	}
	lr.job = id
	q := r.URL.Query()
	if v := q.Get("follow"); v != "" {
		if lr.follow, err = strconv.ParseBool(v); err != nil {
			errs = append(errs, fmt.Sprintf("follow %q: want true or false", v))
		}
	}
	if v := q.Get("replica"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Sprintf("replica %q: want a replica index", v))
		}
		lr.filter.Replica = &n
	}
	switch v := q.Get("source"); v {
	case "", joblog.SourceSystem, joblog.SourceApplication:
		lr.filter.Source = v
	default:
		errs = append(errs, fmt.Sprintf("source %q: want system or application", v))
	}
	if v := q.Get("since"); v != "" {
		lr.hasSince = true
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			lr.since = unixNano(now.Add(-d))
		} else if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			lr.since = unixNano(t)
		} else {
			errs = append(errs, fmt.Sprintf("since %q: want a duration (1h) or an RFC 3339 time", v))
		}
	}
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = q.Get("lastEventId")
	}
	if v != "" {
		if lr.after, err = strconv.ParseUint(strings.TrimSpace(v), 10, 64); err != nil {
			errs = append(errs, fmt.Sprintf("Last-Event-ID %q: want an event id", v))
		}
		lr.hasAfter = true
	}
	if len(errs) > 0 {
		return lr, errors.New(strings.Join(errs, "; "))
	}
	return lr, nil
}

// unixNano is t in Unix nanoseconds, the numbering of records, clamped to
// what that numbering holds: 0 for a time before 1970, the largest number
// after 2262 (t.UnixNano is undefined outside 1678–2262: 1500 would come
// out in 2084).
func unixNano(t time.Time) uint64 {
	switch {
	case t.Before(time.Unix(0, 0)):
		return 0
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return uint64(t.UnixNano())
}

// sseWriter writes events to a viewer, each write bounded by a deadline.
type sseWriter struct {
	w       *bufio.Writer
	rc      *http.ResponseController
	timeout time.Duration
	err     error
}

func (s *sseWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.err = err
	return n, err
}

func (s *sseWriter) event(typ string, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(s, "event: %s\ndata: %s\n\n", typ, b)
}

// arm bounds the writes that follow by the write timeout.
func (s *sseWriter) arm() { _ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout)) }

func (s *sseWriter) flush() error {
	if s.err != nil {
		return s.err
	}
	s.arm()
	if s.err = s.w.Flush(); s.err == nil {
		s.err = s.rc.Flush()
	}
	return s.err
}

const readBatch = 256

func (m *Monitor) serveLogs(w http.ResponseWriter, r *http.Request, auth Authorizer) {
	now := m.now()
	lr, err := parseLogsRequest(r, now)
	if err != nil {
		writeError(w, http.StatusBadRequest, apiv1.CodeInvalid, err.Error())
		return
	}
	if err := auth.AuthorizeJob(r, lr.job); err != nil {
		var ae *AuthError
		if errors.As(err, &ae) {
			writeError(w, ae.Status, ae.Code, ae.Message)
			return
		}
		writeError(w, http.StatusBadGateway, apiv1.CodeUnavailable, "authorize: "+err.Error())
		return
	}
	if lr.follow {
		who := viewerKey(r, auth)
		if !m.takeFollow(who) {
			m.met.followsOut.Inc()
			writeError(w, http.StatusTooManyRequests, apiv1.CodeTooManyRequests,
				fmt.Sprintf("too many log follows open: at most %d per user (the monitor's maxFollowsPerUser); close one first", m.cfg.MaxFollowsPerUser))
			return
		}
		defer m.releaseFollow(who)
	}
	ctx := r.Context()
	j, v := m.subscribe(lr.job)
	defer m.unsubscribe(j, v)

	// lo is the first number wanted; history is wanted unless the viewer
	// only follows (then the buffer is the history).
	var lo uint64
	wantHistory := true
	switch {
	case lr.hasAfter:
		lo = lr.after + 1
	case lr.hasSince:
		lo = lr.since
	case !lr.follow:
		lo = unixNano(now.Add((-m.cfg.Loki.MaxLookback).D()))
	default:
		wantHistory = false
	}
	// History reaches back MaxLookback at most: an older since (or
	// Last-Event-ID) is clamped, and the stream says so.
	var clamped string
	if limit := unixNano(now.Add((-m.cfg.Loki.MaxLookback).D())); wantHistory && lo < limit {
		lo = limit
		if lr.hasSince || lr.hasAfter {
			clamped = fmt.Sprintf("history reaches back %s (the monitor's maxLookback): it starts at %s, not earlier",
				m.cfg.Loki.MaxLookback.D(), time.Unix(0, int64(limit)).UTC().Format(time.RFC3339))
		}
	}
	j.mu.RLock()
	floor := j.floor
	j.mu.RUnlock()
	needOlder := wantHistory && lo <= floor

	hist := HistoryBufferOnly
	if m.loki != nil {
		hist = HistoryLoki
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Set(HistoryHeader, hist)
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{w: bufio.NewWriterSize(w, 32<<10), rc: http.NewResponseController(w), timeout: m.cfg.WriteTimeout.D()}
	sw.arm()
	fmt.Fprintf(sw, ": cosmicac job %s logs; history: %s\nretry: 2000\n\n", lr.job, hist)
	sw.event("meta", Meta{History: hist, Follow: lr.follow, Partial: needOlder && m.loki == nil})
	if clamped != "" {
		sw.event("warning", map[string]string{"message": clamped})
	}

	var last uint64 // number of the last record sent
	if lr.hasAfter {
		last = lr.after
	}
	// History older than the buffer, from Loki: [lo, floor]. Records the
	// buffer drops meanwhile raise its floor; read them from Loki too.
	start := lo
	lokiOK := m.loki != nil && wantHistory
	var cur, stop uint64
	for {
		if needOlder && lokiOK {
			for start <= floor {
				if !m.waitPushed(ctx, floor, 5*time.Second) {
					sw.event("warning", map[string]string{"message": "Loki is behind: the most recent history may be incomplete"})
				}
				err := m.loki.queryRange(ctx, lr.job, lr.filter, start, floor+1, func(e Entry) error {
					sw.arm()
					b, err := json.Marshal(e.Record)
					if err != nil {
						return err
					}
					sw.Write(sseFrame(e.Seq, b))
					last = e.Seq
					return sw.err
				})
				if err != nil {
					if ctx.Err() != nil || sw.err != nil {
						return
					}
					m.met.history.WithLabelValues("loki", "error").Inc()
					sw.event("warning", map[string]string{"message": "history from Loki unavailable: " + err.Error()})
					lokiOK = false
					break
				}
				m.met.history.WithLabelValues("loki", "ok").Inc()
				start = floor + 1
				j.mu.RLock()
				floor = j.floor
				j.mu.RUnlock()
			}
			if sw.flush() != nil {
				return
			}
		}
		// Then the buffer, from the first record numbered start or above,
		// found under the same lock as the floor: records numbered start or
		// above that the buffer dropped since the floor was last read are
		// read from Loki first (else they would be skipped unseen).
		j.mu.RLock()
		if lokiOK && j.floor >= start {
			floor, needOlder = j.floor, true
			j.mu.RUnlock()
			continue
		}
		if start > 0 {
			cur = j.after(start - 1)
		} else {
			cur = j.first
		}
		stop = j.end() // without follow: the end as of now
		j.mu.RUnlock()
		break
	}

	heartbeat := time.NewTicker(m.cfg.Heartbeat.D())
	defer heartbeat.Stop()
	batch := make([]*entry, 0, readBatch)
	caughtUp := false
	for {
		j.mu.RLock()
		end := j.end()
		if !lr.follow {
			end = min(end, stop)
		}
		gone := cur < j.first
		lag := end - cur
		if !gone {
			n := min(end-cur, readBatch)
			off := cur - j.first
			batch = append(batch[:0], j.entries[off:off+n]...)
		}
		j.mu.RUnlock()
		// The backlog a viewer starts with is not lag; what piles up once
		// it has caught up is.
		if gone || (lr.follow && caughtUp && lag > uint64(m.cfg.ViewerMaxLag)) {
			m.met.cutOff.WithLabelValues("lagged").Inc()
			sw.event("cutoff", Cutoff{Reason: "lagged", LastID: last,
				Message: fmt.Sprintf("this viewer fell %d records behind (at most %d); reconnect with Last-Event-ID: %d to resume", lag, m.cfg.ViewerMaxLag, last)})
			sw.flush()
			return
		}
		if lag > 0 {
			m.met.lag.Observe(float64(lag))
		}
		sent := 0
		sw.arm()
		for _, e := range batch {
			if e.Seq <= last || !lr.filter.match(&e.Record) {
				continue
			}
			sw.Write(e.frame)
			last = e.Seq
			sent++
		}
		cur += uint64(len(batch))
		if sent > 0 {
			m.met.recordsOut.Add(float64(sent))
		}
		if cur < end {
			if sw.err != nil {
				m.met.cutOff.WithLabelValues("write").Inc()
				return
			}
			continue
		}
		caughtUp = true
		if !lr.follow {
			sw.event("end", map[string]uint64{"lastId": last})
			sw.flush()
			return
		}
		if sw.flush() != nil {
			m.met.cutOff.WithLabelValues("write").Inc()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-m.quit:
			return
		case <-v.wake:
		case <-heartbeat.C:
			fmt.Fprint(sw, ": ping\n\n")
		}
	}
}

// takeFollow counts a follow of user who, unless who has
// MaxFollowsPerUser open already.
func (m *Monitor) takeFollow(who string) bool {
	m.followMu.Lock()
	defer m.followMu.Unlock()
	if m.follows[who] >= m.cfg.MaxFollowsPerUser {
		return false
	}
	m.follows[who]++
	return true
}

func (m *Monitor) releaseFollow(who string) {
	m.followMu.Lock()
	defer m.followMu.Unlock()
	if m.follows[who]--; m.follows[who] <= 0 {
		delete(m.follows, who)
	}
}

// waitPushed waits (at most d) until every record numbered up to seq is in
// Loki, reporting whether it is.
func (m *Monitor) waitPushed(ctx context.Context, seq uint64, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for m.pushed.Load() < seq {
		if time.Now().After(deadline) || !backoff.Sleep(ctx, 10*time.Millisecond) {
			return false
		}
	}
	return true
}
