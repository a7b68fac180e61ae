package appnode

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/httpserve"
)

// Config is the app-node's configuration.
type Config struct {
	// Listen is the HTTP listen address (host:port).
	Listen string `json:"listen"`
	// DataDir holds admin.token, written at bootstrap.
	DataDir string `json:"dataDir"`
	// MaxBody is the largest request body accepted, in bytes (413 beyond).
	MaxBody int64 `json:"maxBody"`
	// OrkTimeout bounds each call to the ork.
	OrkTimeout config.Duration `json:"orkTimeout"`
	// ShutdownGrace is how long Run waits for requests in flight at shutdown.
	ShutdownGrace config.Duration `json:"shutdownGrace"`
	// AuditRetention is how long the audit log keeps a record (0: for
	// ever).
	AuditRetention config.Duration `json:"auditRetention"`
	// SessionLife bounds a browser session from its sign-in.
	SessionLife config.Duration `json:"sessionLife"`
	// JobCreatesPerMinute bounds the jobs one team creates (a token
	// bucket of that many, refilled at that rate; default 120; 0 or
	// negative: no bound), so that one team's script cannot flood the ork for all.
	// It is per app-node. The ork bounds the jobs a team holds
	// (ork.Config.MaxJobsPerTeam).
	JobCreatesPerMinute int `json:"jobCreatesPerMinute"`
	// SecureCookies marks the session cookie Secure even on plain HTTP
	// (behind a gateway that ends TLS); over TLS it always is.
	SecureCookies bool `json:"secureCookies"`
	// TrustedProxies are the gateways (IP addresses or CIDR prefixes) whose
	// X-Forwarded-For the app-node believes for the client's address (sign-in
	// limits, the audit log). Empty: none; the TCP peer is the client.
	TrustedProxies []string `json:"trustedProxies,omitempty"`
	// SecretsKeyFile is the key datastores' secret keys are sealed with
	// (internal/seal; default DataDir/secrets.key, made there, mode 0600,
	// if absent). Every app-node of one database must be given the same
	// file: a secret sealed by one opens only with its key.
	SecretsKeyFile string `json:"secretsKeyFile,omitempty"`
	// HTTP bounds Serve's clients (zero fields: httpserve.DefaultLimits).
	// Config files set it in the component's http section, not here.
	HTTP httpserve.Limits `json:"-"`
}

// Defaults of DefaultConfig.
const (
	DefaultListen  = "127.0.0.1:8080"
	DefaultMaxBody = 1 << 20
)

// DefaultConfig returns the defaults; DataDir is left for the caller (the
// CLI puts it under the user's data directory).
func DefaultConfig() Config {
	return Config{
		Listen:        DefaultListen,
		MaxBody:       DefaultMaxBody,
		OrkTimeout:    config.Duration(30 * time.Second),
		ShutdownGrace: config.Duration(10 * time.Second),
		// AuditRetention: a year, the span most audit frameworks ask for.
		AuditRetention: config.Duration(365 * 24 * time.Hour),
		SessionLife:    config.Duration(12 * time.Hour),
		// A team's burst of 120 creates, then two a second: a sweep of a
		// few hundred jobs takes minutes, a runaway loop is stopped.
		JobCreatesPerMinute: 120,
	}
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("listen %q: want host:port: %w", c.Listen, err))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("dataDir is required"))
	}
	if c.MaxBody < 1<<10 || c.MaxBody > 64<<20 {
		errs = append(errs, fmt.Errorf("maxBody %d: want 1 KiB to 64 MiB", c.MaxBody))
	}
	if c.OrkTimeout <= 0 {
		errs = append(errs, errors.New("orkTimeout must be positive"))
	}
	if c.ShutdownGrace < 0 {
		errs = append(errs, errors.New("shutdownGrace must not be negative"))
	}
	if c.AuditRetention < 0 {
		errs = append(errs, errors.New("auditRetention must not be negative"))
	}
	if c.SessionLife < config.Duration(time.Minute) || c.SessionLife > config.Duration(30*24*time.Hour) {
		errs = append(errs, fmt.Errorf("sessionLife %v: want 1m to 720h", c.SessionLife.D()))
	}
	if _, err := httpserve.ParseProxies(c.TrustedProxies); err != nil {
		errs = append(errs, err)
	}
	if err := c.HTTP.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// secretsKeyFile is SecretsKeyFile, or its default under DataDir.
func (c Config) secretsKeyFile() string {
	if c.SecretsKeyFile != "" {
		return c.SecretsKeyFile
	}
	return filepath.Join(c.DataDir, "secrets.key")
}
