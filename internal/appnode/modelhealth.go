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
// announcements and its own observations of errors and latency); when it
// runs in the app-node's process (`cosmicac up`) the platform hands it to
// the app-node, which fills Status.ModelHealth of managed-inference jobs
// in getJob and listJobs. The ork does not keep it: it is an observation
// of the serving path, not of the job's lifecycle.
type ModelHealthSource interface {
	ModelHealth(ctx context.Context, jobID string) (cosmic.ModelHealth, error)
}

// SetModelHealth installs the model-health source (call it before serving).
// Without one, jobs are answered as the ork has them (no modelHealth).
func (s *Server) SetModelHealth(h ModelHealthSource) { s.modelHealth = h }

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
