package monitor

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/cosmicac/cosmicac/internal/config"
)

// Config is wrk-monitor's configuration.
type Config struct {
	// DataDir holds the Loki spool (DataDir/spool). Required when Loki is
	// configured.
	DataDir string `json:"dataDir"`
	// BufferPerJob is how many records of each job are kept in memory: the
	// history of a just-opened view without Loki, and how far a viewer may
	// fall behind. Default 10000.
	BufferPerJob int `json:"bufferPerJob"`
	// MaxJobs bounds the jobs with a buffer; the longest idle one without
	// viewers goes first. Default 10000.
	MaxJobs int `json:"maxJobs"`
	// JobIdle drops the buffer of a job without records or viewers for this
	// long. Default 1h.
	JobIdle config.Duration `json:"jobIdle"`
	// ViewerMaxLag is how many records a live viewer may be behind before
	// it is cut off (with a final "cutoff" event). Default BufferPerJob/2.
	ViewerMaxLag int `json:"viewerMaxLag"`
	// WriteTimeout bounds one write to a viewer: a viewer that does not
	// read for this long is disconnected. Default 10s.
	WriteTimeout config.Duration `json:"writeTimeout"`
	// Heartbeat is how often an idle stream gets an SSE comment. Default 15s.
	Heartbeat config.Duration `json:"heartbeat"`
	// Loki, when Loki.URL is set, receives every record.
	Loki LokiConfig `json:"loki"`
}

// LokiConfig configures forwarding to Loki and reading history from it.
type LokiConfig struct {
	// URL is Loki's base URL, e.g. http://loki:3100. Empty: no Loki.
	URL string `json:"url"`
	// TenantID is sent as X-Scope-OrgID when set.
	TenantID string `json:"tenantID"`
	// Username and Password: HTTP basic auth, when Username is set.
	Username string `json:"username"`
	Password string `json:"password"`
	// BearerToken: Authorization: Bearer, when set (and no Username).
	BearerToken string `json:"bearerToken"`
	// Format of pushes: "protobuf" (snappy-compressed, the default) or
	// "json" (gzip-compressed).
	Format string `json:"format"`
	// BatchRecords and BatchBytes bound one push (default 10000 and 1 MiB
	// of spooled records); BatchWait is how long a small batch waits for
	// more (default 100ms).
	BatchRecords int             `json:"batchRecords"`
	BatchBytes   int             `json:"batchBytes"`
	BatchWait    config.Duration `json:"batchWait"`
	// MinBackoff and MaxBackoff bound the wait between retries of a failed
	// push (default 100ms and 30s); a 429's Retry-After is honoured.
	MinBackoff config.Duration `json:"minBackoff"`
	MaxBackoff config.Duration `json:"maxBackoff"`
	// Timeout bounds one HTTP request to Loki. Default 30s.
	Timeout config.Duration `json:"timeout"`
	// SpoolBytes bounds the spool of records not yet in Loki; a batch that
	// would overflow it is refused (the producer keeps it). Default 1 GiB.
	SpoolBytes int64 `json:"spoolBytes"`
	// SegmentBytes is the size at which a spool segment is closed and a
	// new one begun. Default 16 MiB.
	SegmentBytes int64 `json:"segmentBytes"`
	// QueryLimit is the page size of query_range reads. Default 5000.
	QueryLimit int `json:"queryLimit"`
	// MaxLookback is how far back history reaches when no since is given.
	// Default 720h (Loki's default max_query_length is 721h).
	MaxLookback config.Duration `json:"maxLookback"`
}

// DefaultConfig returns the defaults, keeping the spool in dataDir.
func DefaultConfig(dataDir string) Config {
	c := Config{DataDir: dataDir}
	c.setDefaults()
	return c
}

func (c *Config) setDefaults() {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defD := func(p *config.Duration, v time.Duration) {
		if *p == 0 {
			*p = config.Duration(v)
		}
	}
	def(&c.BufferPerJob, 10000)
	def(&c.MaxJobs, 10000)
	def(&c.ViewerMaxLag, max(c.BufferPerJob/2, 1))
	defD(&c.JobIdle, time.Hour)
	defD(&c.WriteTimeout, 10*time.Second)
	defD(&c.Heartbeat, 15*time.Second)
	l := &c.Loki
	if l.Format == "" {
		l.Format = "protobuf"
	}
	def(&l.BatchRecords, 10000)
	def(&l.BatchBytes, 1<<20)
	def(&l.QueryLimit, 5000)
	defD(&l.BatchWait, 100*time.Millisecond)
	defD(&l.MinBackoff, 100*time.Millisecond)
	defD(&l.MaxBackoff, 30*time.Second)
	defD(&l.Timeout, 30*time.Second)
	defD(&l.MaxLookback, 720*time.Hour)
	if l.SpoolBytes == 0 {
		l.SpoolBytes = 1 << 30
	}
	if l.SegmentBytes == 0 {
		l.SegmentBytes = 16 << 20
	}
}

// Validate reports every problem of c (after defaults).
func (c Config) Validate() error {
	c.setDefaults()
	var errs []error
	if c.BufferPerJob < 1 {
		errs = append(errs, errors.New("bufferPerJob: must be positive"))
	}
	if c.ViewerMaxLag > c.BufferPerJob || c.ViewerMaxLag < 1 {
		errs = append(errs, fmt.Errorf("viewerMaxLag: must be between 1 and bufferPerJob (%d)", c.BufferPerJob))
	}
	if c.Loki.URL != "" {
		if u, err := url.Parse(c.Loki.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("loki.url %q: want http(s)://host[:port]", c.Loki.URL))
		}
		if c.DataDir == "" {
			errs = append(errs, errors.New("dataDir: required with loki.url (the spool lives there)"))
		}
		if c.Loki.Format != "protobuf" && c.Loki.Format != "json" {
			errs = append(errs, fmt.Errorf("loki.format %q: want protobuf or json", c.Loki.Format))
		}
		if c.Loki.SpoolBytes < c.Loki.SegmentBytes {
			errs = append(errs, errors.New("loki.spoolBytes: must be at least loki.segmentBytes"))
		}
	}
	return errors.Join(errs...)
}
