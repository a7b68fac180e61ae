package gateway

import (
	"io"
	"os"
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

// OpenWriter returns a writer to what Start set last (standard error
// before any): Caddy keeps its writers in a pool by WriterKey across
// configs, so the writer looks the output up at each write, serialized
// (Caddy's loggers write from many goroutines).
func (logWriter) OpenWriter() (io.WriteCloser, error) { return currentOutput{}, nil }

type currentOutput struct{}

func (currentOutput) Write(p []byte) (int, error) {
	logMu.Lock()
	defer logMu.Unlock()
	if logOut == nil {
		return os.Stderr.Write(p)
	}
	return logOut.Write(p)
}

func (currentOutput) Close() error { return nil }
