package k8sworker

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// health probes the apiserver's /readyz: the worker answers the ork only
// while it succeeds, so that an apiserver that goes away makes the rack's
// jobs unknown (the ork's view of a worker whose calls fail), never failed.
type health struct {
	hc  *http.Client
	url string
	// fresh is how long a probe's answer is trusted by check.
	fresh time.Duration

	mu        sync.Mutex
	ok        bool
	err       error
	checked   time.Time
	downSince time.Time
}

func newHealth(c *rest.Config) (*health, error) {
	cfg := rest.CopyConfig(c)
	cfg.Timeout = healthTimeout
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("k8sworker: health client: %w", err)
	}
	u, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("k8sworker: apiserver URL: %w", err)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/readyz"
	return &health{hc: hc, url: u.String(), fresh: healthInterval / 2, err: fmt.Errorf("not probed yet")}, nil
}

// probe asks /readyz once and records the answer; it reports whether the
// apiserver came back.
func (h *health) probe(ctx context.Context) (recovered bool) {
	err := h.get(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	wasDown := !h.ok && !h.checked.IsZero()
	h.checked = now
	if err != nil {
		if h.ok || h.downSince.IsZero() {
			h.downSince = now
		}
		h.ok, h.err = false, err
		return false
	}
	h.ok, h.err, h.downSince = true, nil, time.Time{}
	return wasDown
}

func (h *health) get(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url, nil)
	if err != nil {
		return err
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return fmt.Errorf("the Kubernetes apiserver is unreachable: %w", err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the Kubernetes apiserver is not ready (%s /readyz: %s)", resp.Status, body)
	}
	return nil
}

// check returns nil if the apiserver answered lately, probing it if the last
// answer is older than fresh.
func (h *health) check(ctx context.Context) error {
	h.mu.Lock()
	stale := time.Since(h.checked) > h.fresh
	h.mu.Unlock()
	if stale {
		h.probe(ctx)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ok {
		return nil
	}
	if !h.downSince.IsZero() {
		return fmt.Errorf("%w (since %s)", h.err, h.downSince.Format(time.RFC3339))
	}
	return h.err
}

// healthy reports the last probe's answer without probing.
func (h *health) healthy() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ok
}

// run probes every healthInterval until ctx is done, calling recovered when
// the apiserver comes back after being away.
func (h *health) run(ctx context.Context, recovered func()) {
	t := time.NewTicker(healthInterval)
	defer t.Stop()
	for {
		if h.probe(ctx) && ctx.Err() == nil {
			recovered()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
