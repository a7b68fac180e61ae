package postgres

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/store/postgres/pgtest"
	"github.com/cosmicac/cosmicac/internal/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func TestConformance(t *testing.T) {
	var (
		mu   sync.Mutex
		dsns = map[string]string{}
	)
	storetest.Run(t, func(t *testing.T) store.Store {
		mu.Lock()
		dsn, ok := dsns[t.Name()]
		mu.Unlock()
		if !ok {
			dsn = pgtest.DSN(t)
			mu.Lock()
			dsns[t.Name()] = dsn
			mu.Unlock()
		}
		s, err := Open(context.Background(), dsn)
		if err != nil {
			t.Fatalf("Open = %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
