package appnode

import (
	"errors"
	"fmt"
	"net"
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
	if err := c.HTTP.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
