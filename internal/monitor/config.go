package monitor

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/cosmicac/cosmicac/internal/httpserve"

	"github.com/cosmicac/cosmicac/internal/config"
)

// Config is wrk-monitor's configuration.
type Config struct {
	// DataDir holds the Loki spool (DataDir/spool). Required when Loki is
	// configured.
	DataDir string `json:"dataDir"`
	// HTTP bounds the clients of the HTTP API that Run serves (zero
	// fields: httpserve.DefaultLimits); the component's `http` section.
	HTTP httpserve.Limits `json:"-"`
	// BufferPerJob is how many records of each job are kept in memory: the
	// history of a just-opened view without Loki, and how far a viewer may
	// fall behind. Default 10000.
	BufferPerJob int `json:"bufferPerJob"`
	// BufferBytesPerJob bounds the bytes each job's buffer holds (its
	// records and their encoded events; at most BufferBytes), as
	// BufferPerJob bounds its records: the oldest go first. Default 16 MiB.
	BufferBytesPerJob int64 `json:"bufferBytesPerJob"`
	// BufferBytes bounds the bytes of every job's buffer together: over
	// it, the largest buffer loses its oldest records. Default 512 MiB.
	BufferBytes int64 `json:"bufferBytes"`
	// MaxLineBytes caps a record's line when the monitor takes it: a
	// longer line is cut at a character boundary and ends with a marker
	// saying how long it was. Default 64 KiB: the instance agent's own
	// line split, and a quarter of Loki's max_line_size, so that a cut
	// line is still stored in Loki.
	MaxLineBytes int `json:"maxLineBytes"`
	// MaxFollowsPerUser bounds the live follows (follow=true) one user
	// holds open at once, over all their tokens and sessions; one more is
	// answered 429. Default 16.
	MaxFollowsPerUser int `json:"maxFollowsPerUser"`
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
	// SpoolBytesPerJob is one job's share of the spool (at most
	// SpoolBytes): a job's records that would take it past its share are
	// refused (counted, in the reply's Refused, and noted in the job's log
	// once it has room again) while other jobs' are still taken. Default
	// 64 MiB, a sixteenth of the default spool.
	SpoolBytesPerJob int64 `json:"spoolBytesPerJob"`
	// SegmentBytes is the size at which a spool segment is closed and a
	// new one begun. Default 16 MiB.
	SegmentBytes int64 `json:"segmentBytes"`
	// QueryLimit is the page size of query_range reads. Default 5000
	// (at most Limits.MaxEntriesLimitPerQuery is asked for at once).
	QueryLimit int `json:"queryLimit"`
	// MaxLookback is how far back history reaches: the default when no
	// since is given, and the limit of an older since (clamped, with a
	// warning event). Default 720h.
	MaxLookback config.Duration `json:"maxLookback"`
	// Limits are the Loki's own limits (its limits_config); the defaults
	// are Loki 3.7's.
	Limits LokiLimits `json:"limits"`
}

// LokiLimits mirror the limits_config of the Loki pushed to, so that the
// monitor sends only what it takes (pkg/validation/limits.go of Loki).
type LokiLimits struct {
	// RejectOldSamplesMaxAge: records older than this are not pushed but
	// dropped and counted (reason too_old). Default 168h (Loki's
	// reject_old_samples_max_age, 7d); negative: push them all.
	RejectOldSamplesMaxAge config.Duration `json:"rejectOldSamplesMaxAge"`
	// CreationGracePeriod: records numbered further than this in the
	// future are dropped likewise (too_new). Default 10m; negative: none.
	CreationGracePeriod config.Duration `json:"creationGracePeriod"`
	// MaxLineSize: records with a longer line are dropped likewise
	// (line_too_long). Default 256 KiB (Loki's max_line_size, 256KB);
	// negative: no limit.
	MaxLineSize int `json:"maxLineSize"`
	// MaxEntriesLimitPerQuery bounds one query_range's limit: larger
	// pages are asked for in several requests. Default 5000.
	MaxEntriesLimitPerQuery int `json:"maxEntriesLimitPerQuery"`
	// MaxQueryLength bounds one query_range's end - start: longer reads
	// are split. Default 721h.
	MaxQueryLength config.Duration `json:"maxQueryLength"`
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
	def64 := func(p *int64, v int64) {
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
	def(&c.MaxLineBytes, 64<<10)
	def(&c.MaxFollowsPerUser, 16)
	def64(&c.BufferBytesPerJob, 16<<20)
	def64(&c.BufferBytes, 512<<20)
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
	defD(&l.Limits.RejectOldSamplesMaxAge, 7*24*time.Hour)
	defD(&l.Limits.CreationGracePeriod, 10*time.Minute)
	defD(&l.Limits.MaxQueryLength, 721*time.Hour)
	def(&l.Limits.MaxLineSize, 256<<10)
	def(&l.Limits.MaxEntriesLimitPerQuery, 5000)
	def64(&l.SpoolBytes, 1<<30)
	def64(&l.SpoolBytesPerJob, 64<<20)
	def64(&l.SegmentBytes, 16<<20)
}

// Validate reports every problem of c (after defaults).
func (c Config) Validate() error {
	c.setDefaults()
	var errs []error
	if c.BufferPerJob < 1 {
		errs = append(errs, errors.New("bufferPerJob: must be positive"))
	}
	if c.MaxLineBytes < 1<<10 {
		errs = append(errs, errors.New("maxLineBytes: must be at least 1024"))
	}
	if min(c.BufferBytesPerJob, c.BufferBytes) < 4*int64(c.MaxLineBytes) {
		errs = append(errs, fmt.Errorf("bufferBytesPerJob, bufferBytes: must hold 4 lines of maxLineBytes (%d)", 4*int64(c.MaxLineBytes)))
	}
	if c.MaxFollowsPerUser < 1 {
		errs = append(errs, errors.New("maxFollowsPerUser: must be positive"))
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
		if c.Loki.Limits.MaxEntriesLimitPerQuery < 1 || c.Loki.QueryLimit < 1 {
			errs = append(errs, errors.New("loki.queryLimit, loki.limits.maxEntriesLimitPerQuery: must be positive"))
		}
		if c.Loki.Limits.MaxQueryLength < config.Duration(time.Minute) {
			errs = append(errs, errors.New("loki.limits.maxQueryLength: must be at least 1m"))
		}
		if c.Loki.SpoolBytes < c.Loki.SegmentBytes {
			errs = append(errs, errors.New("loki.spoolBytes: must be at least loki.segmentBytes"))
		}
		if min(c.Loki.SpoolBytesPerJob, c.Loki.SpoolBytes) < 4*int64(c.MaxLineBytes) {
			errs = append(errs, fmt.Errorf("loki.spoolBytesPerJob, loki.spoolBytes: must hold 4 lines of maxLineBytes (%d)", 4*int64(c.MaxLineBytes)))
		}
	}
	return errors.Join(errs...)
}
