package appnode

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// ModelHealthSource says how well an inference job's model answers
// (docs/inference.md, "Health"). proxy-inference knows it (its replicas'
// announcements and its own observations of errors and latency), and the
// app-node asks it over the fabric (proxyapi.HealthClient, in `cosmicac
// up` as in a standalone app-node given --proxy-inference) to fill
// Status.ModelHealth of managed-inference jobs in getJob and listJobs. The ork does not keep it: it is an observation
// of the serving path, not of the job's lifecycle.
type ModelHealthSource interface {
	ModelHealth(ctx context.Context, jobID string) (cosmic.ModelHealth, error)
}

// modelHealthTimeout bounds the model-health look-ups of one request.
const modelHealthTimeout = 2 * time.Second

// annotateModelHealth fills the model health of the managed-inference jobs
// of js, asking the source in parallel.
func (s *Server) annotateModelHealth(r *http.Request, js []cosmic.Job) {
	if s.modelHealth == nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), modelHealthTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i := range js {
		j := &js[i]
		if j.Spec.Type != cosmic.TypeManagedInference {
			continue
		}
		j.Status.ModelHealth = cosmic.ModelUnknown
		if !j.Status.State.RunsVMs() {
			continue // no replica may serve: unknown without asking
		}
		wg.Go(func() {
			if h, err := s.modelHealth.ModelHealth(ctx, j.ID); err == nil && h != "" {
				j.Status.ModelHealth = h
			}
		})
	}
	wg.Wait()
}
