package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/backoff"
	"github.com/cosmicac/cosmicac/internal/joblog"
)

// LogOptions selects the records of JobLogs.
type LogOptions struct {
	// MonitorURL is wrk-monitor's base URL when it is not served at the
	// API's (cosmicac up serves both at one address); "" means the API's.
	MonitorURL string
	// Follow keeps the stream open for new records. Without Since the
	// stream then begins with the monitor's short buffer.
	Follow bool
	// Source is "system", "application" or "" (both).
	Source string
	// Replica, when set, selects one replica.
	Replica *int
	// Since: records from this long ago ("1h") or this RFC 3339 time on.
	Since string
	// After resumes after this record number (an earlier record's Seq).
	After uint64
	// MaxReconnects bounds reconnections after a dropped stream or a
	// cutoff in a row (default 10; negative: none).
	MaxReconnects int
}

// LogRecord is a job's log record with its monitor sequence number.
type LogRecord struct {
	Seq uint64 `json:"seq"`
	joblog.Record
}

// LogMeta opens a stream: where history comes from ("loki" or
// "buffer-only") and whether older records may be missing (Partial).
type LogMeta struct {
	History string `json:"history"`
	Follow  bool   `json:"follow"`
	Partial bool   `json:"partial"`
}

// Log event types.
const (
	LogRecordEvent  = "record"
	LogMetaEvent    = "meta"
	LogWarningEvent = "warning" // Message says what
	LogCutoffEvent  = "cutoff"  // the monitor cut this viewer off; JobLogs resumes
	LogResumeEvent  = "resume"  // JobLogs reconnected after a dropped stream
)

// LogEvent is one event of JobLogs.
type LogEvent struct {
	Type    string
	Record  *LogRecord // for "record"
	Meta    *LogMeta   // for "meta"
	Message string     // for "warning", "cutoff", "resume"
}

// JobLogs streams job id's log records to fn, oldest first: history (as
// o asks) then, with o.Follow, live records until ctx ends. A record is
// never given twice: after a dropped stream or a cutoff JobLogs reconnects
// with Last-Event-ID and skips what it has seen. It returns nil at the
// end of a stream without Follow, fn's error, or the error that stopped it.
func (c *Client) JobLogs(ctx context.Context, id string, o LogOptions, fn func(LogEvent) error) error {
	base := c.base
	if o.MonitorURL != "" {
		base = strings.TrimRight(o.MonitorURL, "/")
	}
	hc := &http.Client{Transport: c.hc.Transport} // no overall timeout: streams are long
	if o.MaxReconnects == 0 {
		o.MaxReconnects = 10
	}
	last, resumed := o.After, o.After > 0
	tries := 0
	retry := backoff.Backoff{Min: 250 * time.Millisecond, Max: 5 * time.Second}
	for {
		q := url.Values{}
		if o.Follow {
			q.Set("follow", "true")
		}
		if o.Source != "" {
			q.Set("source", o.Source)
		}
		if o.Replica != nil {
			q.Set("replica", strconv.Itoa(*o.Replica))
		}
		if o.Since != "" {
			q.Set("since", o.Since)
		}
		u := base + "/monitor/v1/jobs/" + url.PathEscape(id) + "/logs"
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return fmt.Errorf("job logs: %w", err)
		}
		req.Header.Set("Accept", "text/event-stream")
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		if c.userAgent != "" {
			req.Header.Set("User-Agent", c.userAgent)
		}
		if resumed {
			req.Header.Set("Last-Event-ID", strconv.FormatUint(last, 10))
		}
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if tries == 0 && !resumed {
				return fmt.Errorf("GET %s: %w", "/monitor/v1/jobs/"+id+"/logs", err)
			}
		} else if resp.StatusCode != http.StatusOK {
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if resp.StatusCode < 500 || (tries == 0 && !resumed) {
				return decodeError(resp.StatusCode, data)
			}
		} else {
			done, progressed, err := readLogStream(resp.Body, &last, fn)
			resp.Body.Close()
			switch {
			case err != nil && errors.Is(err, errStopped):
				return errors.Unwrap(err)
			case done:
				return nil
			case ctx.Err() != nil:
				return ctx.Err()
			}
			if progressed {
				tries = 0
				retry.Reset()
			}
		}
		// The stream dropped or we were cut off: resume after last.
		tries++
		if o.MaxReconnects < 0 || tries > o.MaxReconnects {
			return fmt.Errorf("job logs: the stream dropped %d times in a row", tries)
		}
		resumed = true
		if err := fn(LogEvent{Type: LogResumeEvent, Message: fmt.Sprintf("reconnecting after record %d", last)}); err != nil {
			return err
		}
		if !retry.Wait(ctx) {
			return ctx.Err()
		}
	}
}

var errStopped = errors.New("stopped")

type stopErr struct{ err error }

func (e stopErr) Error() string        { return e.err.Error() }
func (e stopErr) Unwrap() error        { return e.err }
func (e stopErr) Is(target error) bool { return target == errStopped }

// readLogStream reads SSE events until the stream ends. done: an "end"
// event came. progressed: at least one record did.
func readLogStream(r io.Reader, last *uint64, fn func(LogEvent) error) (done, progressed bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var typ string
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			if data == nil && typ == "" {
				continue
			}
			t := typ
			if t == "" {
				t = "message"
			}
			switch t {
			case LogRecordEvent:
				var rec LogRecord
				if err := json.Unmarshal(data, &rec); err != nil {
					return false, progressed, stopErr{fmt.Errorf("job logs: decode record: %w", err)}
				}
				if rec.Seq > *last {
					*last = rec.Seq
					progressed = true
					if err := fn(LogEvent{Type: LogRecordEvent, Record: &rec}); err != nil {
						return false, progressed, stopErr{err}
					}
				}
			case LogMetaEvent:
				var m LogMeta
				if json.Unmarshal(data, &m) == nil {
					if err := fn(LogEvent{Type: LogMetaEvent, Meta: &m}); err != nil {
						return false, progressed, stopErr{err}
					}
				}
			case LogWarningEvent, LogCutoffEvent:
				var m struct {
					Message string `json:"message"`
				}
				json.Unmarshal(data, &m)
				if err := fn(LogEvent{Type: t, Message: m.Message}); err != nil {
					return false, progressed, stopErr{err}
				}
				if t == LogCutoffEvent {
					return false, progressed, nil
				}
			case "end":
				return true, progressed, nil
			}
			typ, data = "", nil
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			typ = string(value)
		case "data":
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, value...)
		}
	}
	return false, progressed, nil
}
