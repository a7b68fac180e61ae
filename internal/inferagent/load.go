package inferagent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// The runtime's load, as it reports it: its Prometheus /metrics (both
// vLLM and llama.cpp's llama-server, which the agent starts with
// --metrics) and llama-server's /slots (on by default, and --slots).

// loadGauges names, per runtime, the gauges of requests being generated
// and waiting: llama.cpp's tools/server/server-task.cpp (the
// "llamacpp:" metrics), vLLM's vllm/v1/metrics/loggers.py.
var loadGauges = map[cosmic.Runtime][2]string{
	cosmic.RuntimeLlamaCPP: {"llamacpp:requests_processing", "llamacpp:requests_deferred"},
	cosmic.RuntimeVLLM:     {"vllm:num_requests_running", "vllm:num_requests_waiting"},
}

// maxLoadBody bounds what the agent reads of /metrics or /slots.
const maxLoadBody = 4 << 20

// readLoad asks the runtime at base for its load; nil when it gives none.
func (a *Agent) readLoad(ctx context.Context, base string) *agentapi.RuntimeLoad {
	g, ok := loadGauges[a.cfg.Inference.Runtime]
	if !ok {
		return nil
	}
	m, err := a.getLoad(ctx, base+"/metrics")
	if err != nil {
		return nil
	}
	vals, err := parseGauges(io.LimitReader(m, maxLoadBody), g[0], g[1])
	m.Close()
	if err != nil {
		return nil
	}
	l := &agentapi.RuntimeLoad{Running: vals[0], Waiting: vals[1], At: time.Now()}
	if a.cfg.Inference.Runtime == cosmic.RuntimeLlamaCPP {
		if s, err := a.getLoad(ctx, base+"/slots"); err == nil {
			var slots []struct {
				IsProcessing bool `json:"is_processing"`
			}
			if json.NewDecoder(io.LimitReader(s, maxLoadBody)).Decode(&slots) == nil {
				l.Slots = len(slots)
				for _, sl := range slots {
					if sl.IsProcessing {
						l.SlotsBusy++
					}
				}
			}
			s.Close()
		}
	}
	return l
}

// getLoad GETs url with the probes' client; the body is the caller's.
func (a *Agent) getLoad(ctx context.Context, url string) (io.ReadCloser, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := a.hc.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return cancelBody{resp.Body, cancel}, nil
}

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b cancelBody) Close() error { err := b.ReadCloser.Close(); b.cancel(); return err }

// parseGauges reads the values of the named gauges (without labels, or
// summed over their labels) from Prometheus text exposition; a name it
// does not find is an error.
func parseGauges(r io.Reader, names ...string) ([]int, error) {
	sums := make([]float64, len(names))
	found := make([]bool, len(names))
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		for i, n := range names {
			rest, ok := strings.CutPrefix(line, n)
			if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
				continue
			}
			if j := strings.LastIndexByte(rest, '}'); rest[0] == '{' && j >= 0 {
				rest = rest[j+1:]
			}
			f := strings.Fields(rest)
			if len(f) == 0 {
				continue
			}
			v, err := strconv.ParseFloat(f[0], 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			sums[i] += v
			found[i] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := make([]int, len(names))
	for i := range names {
		if !found[i] {
			return nil, fmt.Errorf("no gauge %s", names[i])
		}
		out[i] = int(math.Round(sums[i]))
	}
	return out, nil
}
