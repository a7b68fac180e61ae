package gateway

import (
	"io"
	"sync"

	"github.com/caddyserver/caddy/v2"
)

// writerModule is the Caddy log writer that writes to what Start was
// given: Caddy's writers are modules named in its JSON config, so the
// gateway registers its own.
const writerModule = "cosmicac"

func init() { caddy.RegisterModule(logWriter{}) }

var (
	logMu  sync.Mutex
	logOut io.Writer
)

func setLogOutput(w io.Writer) {
	logMu.Lock()
	defer logMu.Unlock()
	logOut = w
}

// logWriter is the caddy.logging.writers.cosmicac module.
type logWriter struct{}

func (logWriter) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "caddy.logging.writers." + writerModule,
		New: func() caddy.Module { return new(logWriter) },
	}
}

func (logWriter) String() string    { return writerModule }
func (logWriter) WriterKey() string { return "cosmicac_gateway" }

// OpenWriter returns the writer Start set, serialized: Caddy's loggers
// write from many goroutines.
func (logWriter) OpenWriter() (io.WriteCloser, error) {
	logMu.Lock()
	defer logMu.Unlock()
	return &lockedWriter{w: logOut}, nil
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return nil }
