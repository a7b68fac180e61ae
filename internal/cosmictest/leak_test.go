package cosmictest

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Stopping the platform (every component of `cosmicac up`, with a
// gpu-container job's agent and an inference job's agents running, a
// shell opened and closed) leaves no goroutine of its behind: each has an
// owner that waits for it.
func TestStopLeavesNoGoroutine(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	e := NewEnv(t)
	j := e.Create(Container("leak", 1))
	e.WaitState(j.ID, cosmic.StateRunning)
	inf := e.Create(VLLM("leak-llm", 1, 1))
	e.WaitState(inf.ID, cosmic.StateRunning)
	e.Stop()
	// Connections closed by the peers' Close take a moment to wind down;
	// goleak retries for a while (about 2 s) before it reports.
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if err = goleak.Find(ignore); err == nil {
			return
		}
	}
	t.Fatal(err)
}
