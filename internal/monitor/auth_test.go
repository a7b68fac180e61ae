package monitor_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cosmicac/cosmicac/internal/monitor"
)

// TestAPIAuthorizerRevokedWithinASecond: a token the app-node stops
// accepting is refused within 1 s (fake time), despite the cached answer.
func TestAPIAuthorizerRevokedWithinASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var revoked atomic.Bool
		var calls atomic.Int64
		api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			if revoked.Load() {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				w.Write([]byte(`{"error":{"code":"unauthorized","message":"invalid token"}}`))
				return
			}
			w.Write([]byte(`{}`))
		})
		a := monitor.NewAPIAuthorizer("http://app-node", monitor.HandlerTransport(api))
		req := httptest.NewRequest(http.MethodGet, "/monitor/v1/jobs/j/logs", nil)
		req.Header.Set("Authorization", "Bearer tok")
		if err := a.AuthorizeJob(req, "j"); err != nil {
			t.Fatal(err)
		}
		if err := a.AuthorizeJob(req, "j"); err != nil || calls.Load() != 1 {
			t.Fatalf("second ask: %v after %d calls, want nil from the cache", err, calls.Load())
		}
		revoked.Store(true)
		start := time.Now()
		for {
			err := a.AuthorizeJob(req, "j")
			var ae *monitor.AuthError
			if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
				break
			}
			if time.Since(start) > time.Second {
				t.Fatalf("the revoked token still reads logs %v later (%v)", time.Since(start), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}
