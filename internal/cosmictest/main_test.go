package cosmictest

import (
	"os"
	"testing"

	"github.com/cosmicac/cosmicac/internal/store/postgres/pgtest"
)

// TestMain stops the PostgreSQL that BenchmarkAPI's postgres half starts.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
