package inferproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/backoff"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/hop"
	"github.com/cosmicac/cosmicac/internal/httpserve"
	"github.com/cosmicac/cosmicac/internal/inferproxy/keyapi"
	"github.com/cosmicac/cosmicac/internal/inferproxy/proxyapi"
	"github.com/cosmicac/cosmicac/internal/trust"
)

// Prefix is where the OpenAI-compatible API is served (proxyapi.Prefix).
const Prefix = proxyapi.Prefix

// Config tunes the proxy.
type Config struct {
	// HTTP bounds the clients of the server Run serves (zero fields:
	// httpserve.DefaultLimits); the component's `http` section.
	HTTP httpserve.Limits `json:"-"`
	// MaxBodyBytes bounds a JSON request (default 16 MiB); MaxAudioBytes an
	// audio upload (default 64 MiB). Larger ones are answered 413.
	MaxBodyBytes  int64 `json:"maxBodyBytes,omitempty"`
	MaxAudioBytes int64 `json:"maxAudioBytes,omitempty"`
	// MaxAnonymousBodyBytes and MaxAnonymousAudioBytes bound them for a
	// caller without a key (defaults 256 KiB and 8 MiB: a long prompt, a
	// few minutes of speech), whose body is read only after its address's
	// limits admitted it.
	MaxAnonymousBodyBytes  int64 `json:"maxAnonymousBodyBytes,omitempty"`
	MaxAnonymousAudioBytes int64 `json:"maxAnonymousAudioBytes,omitempty"`
	// MaxConcurrentPerKey bounds a key's requests in flight (default 64);
	// RequestsPerMinute its request rate (default 600). Both are answered
	// 429 with Retry-After. Zero takes the default, negative turns it off.
	// Callers without a key are limited per client address: the TCP
	// peer's, or behind a gateway listed in TrustedProxies, the address it
	// forwarded for (httpserve.Proxies). Every request counts, before its
	// body is read, whether it names a model or not.
	MaxConcurrentPerKey int      `json:"maxConcurrentPerKey,omitempty"`
	RequestsPerMinute   int      `json:"requestsPerMinute,omitempty"`
	TrustedProxies      []string `json:"trustedProxies,omitempty"`
	// MaxAttempts bounds the replicas one request is tried on (default 3).
	MaxAttempts int `json:"maxAttempts,omitempty"`
	// CatalogTTL is how long the model list is kept (default 1s: a job's
	// "require authorization" changed takes effect within it), LookupTTL a
	// job's replica list (default 1s), KeyTTL a looked-up API key (default
	// 1s: a revoked key works at most that long).
	CatalogTTL config.Duration `json:"catalogTTL,omitempty"`
	LookupTTL  config.Duration `json:"lookupTTL,omitempty"`
	KeyTTL     config.Duration `json:"keyTTL,omitempty"`
	// DownFor keeps a replica that failed to answer out of rotation
	// (default 5s, or until the directory says it is ready again).
	DownFor config.Duration `json:"downFor,omitempty"`
	// SlowFirstByte makes a replica degraded when its time to first byte
	// (EWMA) or its probe is slower (default 10s).
	SlowFirstByte config.Duration `json:"slowFirstByte,omitempty"`
	// ReadyWait is how long a request for a model none of whose replicas
	// is ready (they are starting) waits for one before it is answered 503
	// no_ready_replica with Retry-After (default 30s; negative: no wait).
	// A stream gets an SSE comment every KeepAlive (default 5s) meanwhile.
	ReadyWait config.Duration `json:"readyWait,omitempty"`
	KeepAlive config.Duration `json:"keepAlive,omitempty"`
	// WakeWait is how long a request for an autoscaled model waits for a
	// ready replica (default 5m): the time for its job to wake from zero
	// replicas (a VM boots and loads the model), after which it is
	// answered 503 with Retry-After.
	WakeWait config.Duration `json:"wakeWait,omitempty"`
	// UsageFlush is how often the usage measured is delivered to the
	// usage store (default 1s; docs/inference.md, "Metering").
	UsageFlush config.Duration `json:"usageFlush,omitempty"`
}

// DefaultConfig is the proxy's defaults (New also puts them in the zero
// fields of the config it is given).
func DefaultConfig() Config {
	var c Config
	c.setDefaults()
	return c
}

// Validate reports every problem of c: sizes and durations must not be
// negative (a negative per-key limit turns it off).
func (c Config) Validate() error {
	var errs []error
	if c.MaxBodyBytes < 0 || c.MaxAudioBytes < 0 || c.MaxAnonymousBodyBytes < 0 || c.MaxAnonymousAudioBytes < 0 || c.MaxAttempts < 0 {
		errs = append(errs, errors.New("maxBodyBytes, maxAudioBytes, maxAnonymousBodyBytes, maxAnonymousAudioBytes and maxAttempts must not be negative"))
	}
	if _, err := httpserve.ParseProxies(c.TrustedProxies); err != nil {
		errs = append(errs, err)
	}
	for name, d := range map[string]config.Duration{"catalogTTL": c.CatalogTTL, "lookupTTL": c.LookupTTL, "keyTTL": c.KeyTTL,
		"downFor": c.DownFor, "slowFirstByte": c.SlowFirstByte, "keepAlive": c.KeepAlive, "wakeWait": c.WakeWait} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s %s: must not be negative", name, d))
		}
	}
	return errors.Join(errs...)
}

func (c *Config) setDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxConcurrentPerKey, 64)
	def(&c.RequestsPerMinute, 600)
	def(&c.MaxAttempts, 3)
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 16 << 20
	}
	if c.MaxAudioBytes == 0 {
		c.MaxAudioBytes = 64 << 20
	}
	if c.MaxAnonymousBodyBytes == 0 {
		c.MaxAnonymousBodyBytes = 256 << 10
	}
	if c.MaxAnonymousAudioBytes == 0 {
		c.MaxAnonymousAudioBytes = 8 << 20
	}
	dur := func(v *config.Duration, d time.Duration) {
		if *v == 0 {
			*v = config.Duration(d)
		}
	}
	dur(&c.CatalogTTL, time.Second)
	dur(&c.LookupTTL, time.Second)
	dur(&c.KeyTTL, time.Second)
	dur(&c.DownFor, 5*time.Second)
	dur(&c.SlowFirstByte, 10*time.Second)
	dur(&c.ReadyWait, 30*time.Second)
	dur(&c.KeepAlive, 5*time.Second)
	dur(&c.WakeWait, 5*time.Minute)
	dur(&c.UsageFlush, time.Second)
}

// Proxy is proxy-inference: the OpenAI-compatible endpoint in front of the
// replicas of every managed-inference job.
type Proxy struct {
	cfg      Config
	node     *fabric.Node
	catalog  *cachedCatalog
	keys     *keyCache
	replicas *replicaSet
	bg       *background // the caches' reads ahead (ahead.go)
	limits   *limiter
	pool     *hop.Pool         // to agents that relay byte for byte
	xpool    *hop.Pool         // to agents that relay exchanges (llama.cpp's)
	proxies  httpserve.Proxies // trusted gateways
	mux      *http.ServeMux
	handler  http.Handler
	metrics  *proxyMetrics
	prefixes *prefixIndex // of prefix routing (prefix.go)
	loads    *jobLoads    // of the autoscaled jobs (load.go)
	reporter LoadReporter
	usage    *usageBook // the answers' usage (usage.go)
	sink     UsageSink
	log      *slog.Logger
}

// Agents says what the ork bound each agent key to (*trust.Keyring,
// following the ork): the proxy routes a job's requests only to a key
// bound as the head agent of one of that job's replicas, whatever the
// directory lists; and not to a replica a rollout drains.
type Agents interface {
	Principal(key fabric.PublicKey) (trust.Principal, bool)
	Draining(job string, replica int) bool
}

// draining says whether a rollout drains rep.
func (p *Proxy) draining(rep *replica) bool {
	return p.replicas.agents != nil && p.replicas.agents.Draining(rep.job, rep.meta.Load().Replica)
}

// Deps are what a proxy is built on. Catalog and Keys are required.
type Deps struct {
	// Node is proxy-inference's fabric node, where it looks replicas up
	// and reaches their agents, and serves proxyapi (nil: no replica is
	// ever found, for tests of what comes before forwarding).
	Node *fabric.Node
	// Directories are the agents' directories (wrk-directory).
	Directories []fabric.PublicKey
	// Catalog names the models (OrkCatalog: the ork's job list).
	Catalog Catalog
	// Keys resolves API keys (the store in the app-node's process, else
	// FabricKeys, asking the app-node).
	Keys Keys
	// Agents says what the ork bound each agent key to (the keyring
	// following the ork); nil: no agent is routed to.
	Agents Agents
	// Load takes the proxy's load of the autoscaled jobs (the ork's
	// client); nil: none is reported, and no job is scaled for this
	// proxy's requests.
	Load LoadReporter
	// Usage keeps the usage of the answers (the store in the app-node's
	// process, else FabricUsage, the app-node over the fabric); nil: the
	// answers are counted in the metrics only.
	Usage UsageSink
	Log   *slog.Logger
}

// New returns the proxy of cfg on d: it finds replicas through d.Node's
// lookups in d.Directories, models in d.Catalog and API keys in d.Keys.
func New(cfg Config, d Deps) (*Proxy, error) {
	if d.Catalog == nil || d.Keys == nil {
		return nil, errors.New("proxy-inference: a catalog and a key store are required")
	}
	cfg.setDefaults()
	node, dirs, catalog, keys, agents, log := d.Node, d.Directories, d.Catalog, d.Keys, d.Agents, d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	bg := newBackground()
	p := &Proxy{cfg: cfg, node: node, log: log, loads: newJobLoads(), reporter: d.Load, usage: newUsageBook(log), sink: d.Usage,
		catalog:  &cachedCatalog{c: catalog, ttl: cfg.CatalogTTL.D(), bg: bg},
		keys:     &keyCache{keys: keys, ttl: cfg.KeyTTL.D(), now: time.Now, m: map[string]keyEntry{}, bg: bg},
		replicas: &replicaSet{node: node, dirs: dirs, agents: agents, ttl: cfg.LookupTTL.D(), pools: map[string]*pool{}, bg: bg},
		bg:       bg,
		limits:   &limiter{maxConcurrent: max(cfg.MaxConcurrentPerKey, 0), rpm: max(cfg.RequestsPerMinute, 0), keys: map[string]*keyLimit{}},
	}
	p.proxies, _ = httpserve.ParseProxies(cfg.TrustedProxies) // Validate checked them
	p.metrics = newProxyMetrics(p.replicas)
	p.prefixes = newPrefixIndex(prefixEntries)
	// Pools of keep-alive HTTP/1.1 connections to the agents, each a
	// fabric stream (direct where the agent's address is known or it parked
	// connections with us); a replica is the address "<agent key>.agent".
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		key, err := fabric.ParsePublicKey(strings.TrimSuffix(addr, ".agent"))
		if err != nil {
			return nil, err
		}
		c, err := agentapi.DialInference(ctx, node, key)
		if err != nil {
			return nil, err
		}
		p.metrics.agentConns.WithLabelValues(c.Transport()).Inc()
		return c, nil
	}
	p.pool = hop.NewPool(dial, 512, agentIdleFor)
	p.xpool = hop.NewPool(dial, 512, exchangeIdleFor)
	p.mux = http.NewServeMux()
	p.mux.HandleFunc("POST "+Prefix+"/chat/completions", p.forwardJSON)
	p.mux.HandleFunc("POST "+Prefix+"/completions", p.forwardJSON)
	p.mux.HandleFunc("POST "+Prefix+"/embeddings", p.forwardJSON)
	// The Responses API as vLLM serves it (serving_responses.py): create
	// only. vLLM keeps no responses by default (VLLM_ENABLE_RESPONSES_API_STORE),
	// so GET /v1/responses/{id} and its cancel have nothing to reach;
	// they stay 404 here (docs/inference.md, "The API").
	p.mux.HandleFunc("POST "+Prefix+"/responses", p.forwardJSON)
	// Audio files take longer to arrive than JSON: the server's Upload limit.
	p.mux.Handle("POST "+Prefix+"/audio/transcriptions", httpserve.Upload(http.HandlerFunc(p.forwardAudio)))
	p.mux.Handle("POST "+Prefix+"/audio/translations", httpserve.Upload(http.HandlerFunc(p.forwardAudio)))
	p.mux.HandleFunc("GET "+Prefix+"/models", p.listModels)
	p.mux.HandleFunc("GET "+Prefix+"/models/{model...}", p.getModel)
	p.mux.HandleFunc("GET /inference/health", p.health)
	p.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("%s %s is not an endpoint of this API", r.Method, r.URL.Path))
	})
	p.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.metrics.observe(p.mux, w, r) })
	if node != nil {
		p.serve(node)
	}
	return p, nil
}

// Run serves the proxy's HTTP API (Handler) on ln, its clients bounded by
// cfg.HTTP, until ctx ends, and returns once the server has stopped, with
// the idle connections to agents closed. With ln nil the caller serves
// Handler, and Run only waits for ctx.
func (p *Proxy) Run(ctx context.Context, ln net.Listener) error {
	defer p.Close()
	if p.reporter != nil {
		done := make(chan struct{})
		rctx, cancel := context.WithCancel(ctx)
		go func() { defer close(done); p.reportLoads(rctx, p.reporter) }()
		defer func() { cancel(); <-done }()
	}
	if p.sink != nil {
		// Deferred after the server's end: the requests it finished are
		// delivered too.
		done := make(chan struct{})
		uctx, cancel := context.WithCancel(context.Background())
		go func() { defer close(done); p.usage.run(uctx, p.sink, p.cfg.UsageFlush.D()) }()
		defer func() { cancel(); <-done }()
	}
	if ln == nil {
		<-ctx.Done()
		return nil
	}
	hs := httpserve.New(p.Handler(), p.cfg.HTTP, p.log)
	p.log.Info("proxy-inference listening", "addr", ln.Addr().String())
	if err := httpserve.Run(ctx, hs, ln, 0); err != nil {
		return fmt.Errorf("proxy-inference: %w", err)
	}
	return nil
}

// Handler serves /inference/v1/… and /inference/health.
func (p *Proxy) Handler() http.Handler { return p.handler }

// agentIdleFor is how long a connection to an agent may rest before it is
// dropped. The agent relays it to the runtime byte for byte, so it must be
// below the runtime's own keep-alive timeout (uvicorn's, and so vLLM's, is
// 5 s); a dropped one is replaced from the connections the agent parked.
const agentIdleFor = 3 * time.Second

// exchangeIdleFor is agentIdleFor for an agent that relays exchanges
// (llama.cpp's: inferagent's serveExchanges), whose streams outlive the
// runtime's connections and may rest two minutes there (its streamIdle).
// A burst after a pause then finds its connections open: with 3 s, 16
// streams after a pause of a few seconds each waited for a new one
// (docs/benchmarks.md, "Inference on a real engine").
const exchangeIdleFor = time.Minute

// poolFor is the pool of connections to the agents of a runtime's jobs.
func (p *Proxy) poolFor(runtime cosmic.Runtime) *hop.Pool {
	if runtime == cosmic.RuntimeLlamaCPP {
		return p.xpool
	}
	return p.pool
}

// Close drops the pooled connections to the agents, and ends (and waits
// for) the caches' reads ahead.
func (p *Proxy) Close() {
	p.bg.close()
	p.pool.CloseIdle()
	p.xpool.CloseIdle()
}

// ---- errors

// openAIType is the OpenAI error type of a status, the one mapping of the
// proxy's errors to OpenAI's shape: what a client's SDK branches on.
func openAIType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "requests"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

// writeError answers with OpenAI's error shape: the status, its type, and
// code, the proxy's own reason (invalid_api_key, model_not_found, …).
func writeError(w http.ResponseWriter, status int, code, msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": openAIType(status), "code": code, "param": nil}})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

var errNoKey = "missing API key: send Authorization: Bearer KEY or X-API-Key: KEY"

// caller is who sent a request: a key of a team, or nobody.
type caller struct {
	team  string // "" without a key
	keyID string // "" without a key
	limit string // the limiter's key
	tpm   int64  // the key's tokens per minute (0: no cap)
	// models limits the key to these served model names (nil: every model
	// it reaches): its own team's by their bare names, another team's open
	// ones by their full names.
	models []string
}

// allows reports whether the caller's key may use m.
func (c caller) allows(m Model) bool {
	if c.models == nil {
		return true
	}
	if m.Team == c.team && slices.Contains(c.models, m.Name) {
		return true
	}
	return slices.Contains(c.models, m.FullName())
}

// authenticate reads the key of r. A key that is given must be valid.
func (p *Proxy) authenticate(w http.ResponseWriter, r *http.Request) (caller, bool) {
	secret := r.Header.Get(apiv1.HeaderAPIKey)
	if h := r.Header.Get("Authorization"); secret == "" && h != "" {
		scheme, s, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			writeError(w, http.StatusUnauthorized, "invalid_api_key", "the Authorization header must be Bearer KEY")
			return caller{}, false
		}
		secret = strings.TrimSpace(s)
	}
	if secret == "" {
		return caller{limit: "addr:" + p.proxies.ClientIP(r)}, true
	}
	if !strings.HasPrefix(secret, keyapi.KeyPrefix) || len(secret) > 128 {
		writeError(w, http.StatusUnauthorized, "invalid_api_key", "incorrect API key provided")
		return caller{}, false
	}
	k, hash, ok, err := p.keys.lookup(r.Context(), secret)
	if err != nil {
		p.log.Error("look up API key", "err", err)
		writeError(w, http.StatusServiceUnavailable, "auth_unavailable", "API keys cannot be checked now; retry")
		return caller{}, false
	}
	// The key's times are checked at every use: an expired key, or a
	// rotated secret past its grace, stops at once, whatever the cache.
	if now := p.keys.now(); !ok || !k.ValidFor(hash, now) {
		msg := "incorrect API key provided"
		if ok && !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt) {
			msg = "the API key has expired"
		}
		writeError(w, http.StatusUnauthorized, "invalid_api_key", msg)
		return caller{}, false
	}
	c := caller{team: k.Team, keyID: k.ID, limit: "key:" + k.ID, tpm: k.TokensPerMinute}
	if len(k.Models) > 0 {
		c.models = k.Models
	}
	return c, true
}

// ---- models

type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Root is the model id the job serves; Job the job.
	Root string `json:"root,omitempty"`
	Job  string `json:"job,omitempty"`
}

func toObject(n named) modelObject {
	m := n.model
	return modelObject{ID: n.name, Object: "model", Created: m.Created.Unix(), OwnedBy: m.Team, Root: m.ModelID, Job: m.JobID}
}

// models lists the models the caller's key reaches, each under the name
// the caller calls it by. Listing takes a key, as OpenAI's does: without
// one it is 401, like every route (an open model is still called without
// a key, by its full name, which its owner gives out).
func (p *Proxy) models(w http.ResponseWriter, r *http.Request) ([]named, caller, bool) {
	c, ok := p.authenticate(w, r)
	if !ok {
		return nil, c, false
	}
	if c.team == "" {
		writeError(w, http.StatusUnauthorized, "invalid_api_key", errNoKey)
		return nil, c, false
	}
	ms, err := p.catalog.Models(r.Context())
	if err != nil {
		p.log.Error("list models", "err", err)
		writeError(w, http.StatusServiceUnavailable, "catalog_unavailable", "the model list cannot be read now; retry")
		return nil, c, false
	}
	return slices.DeleteFunc(callable(ms, c), func(n named) bool { return !c.allows(n.model) }), c, true
}

func (p *Proxy) listModels(w http.ResponseWriter, r *http.Request) {
	ms, _, ok := p.models(w, r)
	if !ok {
		return
	}
	seen := map[string]bool{}
	data := []modelObject{}
	for _, n := range ms {
		if !seen[n.name] {
			seen[n.name] = true
			data = append(data, toObject(n))
		}
	}
	writeJSON(w, map[string]any{"object": "list", "data": data})
}

func (p *Proxy) getModel(w http.ResponseWriter, r *http.Request) {
	c, ok := p.authenticate(w, r)
	if !ok {
		return
	}
	if c.team == "" {
		writeError(w, http.StatusUnauthorized, "invalid_api_key", errNoKey)
		return
	}
	ms, err := p.catalog.Models(r.Context())
	if err != nil {
		p.log.Error("list models", "err", err)
		writeError(w, http.StatusServiceUnavailable, "catalog_unavailable", "the model list cannot be read now; retry")
		return
	}
	name := r.PathValue("model")
	jobs, _ := resolveWithAdapter(ms, c, name)
	for _, m := range jobs {
		if c.allows(m) {
			writeJSON(w, toObject(named{name, m}))
			return
		}
	}
	writeError(w, http.StatusNotFound, "model_not_found", fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", name))
}

func writeJSON(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// ---- health

// ModelHealth is a model's health apart from its job's status (the
// contract's type: proxyapi).
type ModelHealth = proxyapi.ModelHealth

// JobHealth is the health of a job's model: unknown without any announced
// replica; healthy when every replica is; unhealthy when none is healthy
// or degraded; else degraded.
func (p *Proxy) JobHealth(ctx context.Context, jobID string) (ModelHealth, error) {
	rs, err := p.replicas.get(ctx, jobID)
	if err != nil {
		return ModelHealth{JobID: jobID, Health: HealthUnknown, Replicas: []ReplicaHealth{}}, err
	}
	mh := ModelHealth{JobID: jobID, Replicas: []ReplicaHealth{}}
	good, ok := 0, 0
	for _, r := range rs {
		h := r.health(p.cfg.SlowFirstByte.D())
		mh.Model = r.meta.Load().Model
		mh.Replicas = append(mh.Replicas, h)
		switch h.Health {
		case HealthHealthy:
			good++
			ok++
		case HealthDegraded:
			ok++
		}
	}
	switch {
	case len(rs) == 0:
		mh.Health = HealthUnknown
	case good == len(rs):
		mh.Health = HealthHealthy
	case ok == 0:
		mh.Health = HealthUnhealthy
	default:
		mh.Health = HealthDegraded
	}
	return mh, nil
}

func (p *Proxy) health(w http.ResponseWriter, r *http.Request) {
	ms, _, ok := p.models(w, r)
	if !ok {
		return
	}
	out := []ModelHealth{}
	for _, n := range ms {
		mh, _ := p.JobHealth(r.Context(), n.model.JobID)
		mh.Model = n.name
		out = append(out, mh)
	}
	writeJSON(w, map[string]any{"models": out})
}

// serve registers the proxy's fabric methods on r (proxyapi): New does,
// on Deps.Node.
func (p *Proxy) serve(r fabric.Registrar) {
	proxyapi.Health.Handle(r, func(ctx context.Context, _ fabric.PublicKey, q proxyapi.HealthParams) (ModelHealth, error) {
		return p.JobHealth(ctx, q.JobID)
	}, fabric.ReadOnly())
}

// ---- forwarding

func (p *Proxy) forwardJSON(w http.ResponseWriter, r *http.Request) {
	c, limit, release, ok := p.admitBody(w, r, p.cfg.MaxBodyBytes, p.cfg.MaxAnonymousBodyBytes)
	if !ok {
		return
	}
	defer release()
	body, ok := readBody(w, r, limit)
	if !ok {
		return
	}
	head, err := parseHead(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_json", err.Error())
		return
	}
	jobs, adapter, ok := p.route(w, r, c, head.Model)
	if !ok {
		return
	}
	// The body is rewritten for jobs[0] (its runtime, its adapters'
	// order): the request goes to the jobs of the name that take the same.
	jobs = sameServing(jobs)
	// The chain is read from the body as it came (head's spans are its),
	// seeded with the team's name of the model: one team's prompts never
	// meet another's in the index.
	var chain []uint64
	if routingOf(jobs) == cosmic.RoutingPrefix {
		name := jobs[0].FullName()
		if adapter != "" {
			name += ":" + adapter // an adapter's cache is its own
		}
		chain = p.prefixes.chain(name, body, head)
	}
	switch served := jobs[0].Name; {
	case jobs[0].Runtime == cosmic.RuntimeLlamaCPP && len(jobs[0].Adapters) > 0:
		// llama-server serves one model and applies adapter i when a
		// request says "lora": [{"id": i, "scale": 1}] (its adapters are
		// loaded at scale 0: inferagent's llamaCommand); a request for
		// the base model says scale 0 (withLoRA).
		if served != head.Model {
			body = withModel(body, head, served)
		}
		id := -1
		if adapter != "" {
			id = slices.Index(jobs[0].Adapters, adapter)
		}
		body = withLoRA(body, id)
	case adapter != "":
		body = withModel(body, head, adapter) // vLLM serves an adapter under its name (--lora-modules)
	case served != head.Model:
		body = withModel(body, head, served)
	}
	// Every answer is metered: a stream the client did not ask usage of
	// is asked for it, and its usage chunk dropped on the way back.
	strip := false
	if head.Stream && (r.URL.Path == Prefix+"/chat/completions" || r.URL.Path == Prefix+"/completions") {
		body, strip = withUsage(body)
	}
	p.forward(w, r, c, head.Model, jobs, bytesBody(body), head.Stream, chain, strip)
}

// sameServing is jobs (of one name, oldest first) less those a request
// rewritten for the first would not suit: another runtime, or other
// adapters or in another order (llama.cpp's are asked for by position).
func sameServing(jobs []Model) []Model {
	if len(jobs) < 2 {
		return jobs
	}
	first := jobs[0]
	return slices.DeleteFunc(slices.Clone(jobs), func(m Model) bool {
		return m.Runtime != first.Runtime || !slices.Equal(m.Adapters, first.Adapters)
	})
}

// routingOf is the routing of a model's jobs: the first's.
func routingOf(jobs []Model) cosmic.Routing {
	if len(jobs) == 0 || jobs[0].Routing == "" {
		return cosmic.DefaultRouting
	}
	return jobs[0].Routing
}

func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	if r.ContentLength > limit {
		writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("the request body exceeds %d bytes", limit))
		return nil, false
	}
	b, err := readAll(http.MaxBytesReader(w, r.Body, limit), r.ContentLength)
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("the request body exceeds %d bytes", limit))
		return nil, false
	case errors.Is(err, os.ErrDeadlineExceeded): // the server's body limit
		writeError(w, http.StatusRequestTimeout, "request_timeout", "the request body did not arrive in time")
		return nil, false
	case err != nil:
		writeError(w, http.StatusBadRequest, "bad_body", "read the request body: "+err.Error())
		return nil, false
	}
	return b, true
}

// maxPresize bounds the buffer readAll sizes from a declared length before
// any byte arrived: a client that declares 16 MiB and sends nothing holds
// at most this much.
const maxPresize = 1 << 20

// readAll is io.ReadAll with its buffer sized for the declared length (up
// to maxPresize): io.ReadAll starts at 512 bytes and grows, which for a
// 136 KB body cost 31 allocations and 315 KB (docs/benchmarks.md, "Reading
// the request's head").
func readAll(r io.Reader, declared int64) ([]byte, error) {
	size := 512
	if declared > 0 {
		size = int(min(declared, maxPresize)) + 1 // +1: the read that finds the end
	}
	b := make([]byte, 0, size)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // let append grow it
		}
	}
}

// route finds the jobs serving model to the caller, or answers why there
// are none: 400 no model; 404 unknown or not the key's (401 without a
// key); 503 model_not_serving when the caller's own model of that name is
// stopped, failed or being deleted (never another team's model in its
// place); 400 a parakeet model off the audio paths.
func (p *Proxy) route(w http.ResponseWriter, r *http.Request, c caller, model string) ([]Model, string, bool) {
	if model == "" {
		writeError(w, http.StatusBadRequest, "model_required", "the request names no model")
		return nil, "", false
	}
	if c.team == "" && !strings.HasPrefix(model, "@") {
		// Without a key a bare name names nothing: no catalog read.
		writeError(w, http.StatusUnauthorized, "invalid_api_key", errNoKey+" (an open model is called by its full name, @TEAM/NAME)")
		return nil, "", false
	}
	ms, err := p.catalog.Models(r.Context())
	if err != nil {
		p.log.Error("list models", "err", err)
		writeError(w, http.StatusServiceUnavailable, "catalog_unavailable", "the model list cannot be read now; retry")
		return nil, "", false
	}
	jobs, adapter := resolveWithAdapter(ms, c, model)
	if len(jobs) == 0 {
		if ms, err = p.catalog.fresh(r.Context()); err == nil {
			jobs, adapter = resolveWithAdapter(ms, c, model)
		}
	}
	jobs = slices.DeleteFunc(jobs, func(m Model) bool { return !c.allows(m) })
	if len(jobs) == 0 {
		if m, ok := p.down(r.Context(), c, model); ok {
			writeError(w, http.StatusServiceUnavailable, "model_not_serving",
				fmt.Sprintf("the model `%s` of team %s is not serving: its job %s is %s; restart the job to serve it again", model, m.Team, m.JobID, m.State))
			return nil, "", false
		}
		if c.team == "" {
			// Without a key, an unknown model and another team's look alike.
			writeError(w, http.StatusUnauthorized, "invalid_api_key", errNoKey+" (an open model is called by its full name, @TEAM/NAME)")
			return nil, "", false
		}
		writeError(w, http.StatusNotFound, "model_not_found", fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", model))
		return nil, "", false
	}
	if jobs[0].Runtime == cosmic.RuntimeParakeet && !isAudioPath(r.URL.Path) {
		writeError(w, http.StatusBadRequest, "unsupported_endpoint", fmt.Sprintf("the model `%s` (parakeet) serves only audio/transcriptions and audio/translations", model))
		return nil, "", false
	}
	return jobs, adapter, true
}

// isAudioPath reports whether path is one of the audio uploads
// (forwardAudio): transcriptions and translations.
func isAudioPath(path string) bool {
	return path == Prefix+"/audio/transcriptions" || path == Prefix+"/audio/translations"
}

// down finds the caller's own model of that name that does not serve now.
func (p *Proxy) down(ctx context.Context, c caller, model string) (Model, bool) {
	if c.team == "" {
		return Model{}, false
	}
	ms, err := p.catalog.Down(ctx, c.team)
	if err != nil {
		p.log.Warn("list models that do not serve", "team", c.team, "err", err)
		return Model{}, false
	}
	_, down := resolve(ms, c, model)
	if i := strings.LastIndexByte(model, ':'); len(down) == 0 && i > 0 {
		_, down = resolve(ms, c, model[:i]) // an adapter of a model that does not serve
	}
	for _, m := range down {
		if m.Team == c.team && c.allows(m) {
			return m, true
		}
	}
	return Model{}, false
}

// admitBody authenticates r and admits it (admit), all before a byte of
// its body is read, and answers the bound of its body: limit with a key,
// anonymous (at most limit) without one. An admitted request calls
// release when it ends.
func (p *Proxy) admitBody(w http.ResponseWriter, r *http.Request, limit, anonymous int64) (c caller, bodyLimit int64, release func(), ok bool) {
	if c, ok = p.authenticate(w, r); !ok {
		return c, 0, nil, false
	}
	if release, ok = p.admit(w, c); !ok {
		return c, 0, nil, false
	}
	if c.team == "" {
		limit = min(limit, anonymous)
	}
	return c, limit, release, true
}

// admit counts a request against the caller's limits (its key's, or its
// address's without one) before any of its body is read, or answers 429.
// An admitted request calls release when it ends.
func (p *Proxy) admit(w http.ResponseWriter, c caller) (release func(), ok bool) {
	now := time.Now()
	if c.tpm > 0 {
		// The key's tokens per minute: a request is admitted while its
		// budget is above 0; its answer's tokens are taken after (meter).
		ok, retry, left := p.limits.checkTokens(c.limit, c.tpm, now)
		h := w.Header()
		h.Set("X-Ratelimit-Limit-Tokens", strconv.Itoa(left.limit))
		h.Set("X-Ratelimit-Remaining-Tokens", strconv.Itoa(left.remaining))
		h.Set("X-Ratelimit-Reset-Tokens", left.reset.String())
		if !ok {
			p.metrics.rateLimited.WithLabelValues("tpm").Inc()
			h.Set("Retry-After", strconv.Itoa(max(int(math.Ceil(retry.Seconds())), 1)))
			writeError(w, http.StatusTooManyRequests, "rate_limit_exceeded",
				fmt.Sprintf("rate limit reached: this key's %d tokens per minute are spent; retry in %v", c.tpm, retry.Round(time.Second)))
			return nil, false
		}
	}
	ok, retry, why, left := p.limits.acquire(c.limit, now)
	if left != nil {
		// As the OpenAI API says them (its "Rate limits" guide): the
		// SDKs and clients that pace themselves read these.
		h := w.Header()
		h.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(left.limit))
		h.Set("X-Ratelimit-Remaining-Requests", strconv.Itoa(left.remaining))
		h.Set("X-Ratelimit-Reset-Requests", left.reset.String())
	}
	if !ok {
		p.metrics.rateLimited.WithLabelValues(why).Inc()
		secs := int(math.Ceil(retry.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
		who := "this key"
		if c.team == "" {
			who = "this client (send an API key for a limit of its own)"
		}
		msg := "too many requests in flight for " + who
		if why == "rpm" {
			msg = "rate limit reached: too many requests per minute for " + who
		}
		writeError(w, http.StatusTooManyRequests, "rate_limit_exceeded", msg)
		return nil, false
	}
	return func() { p.limits.release(c.limit) }, true
}

// forward sends the request to a ready replica of the model (one of jobs,
// as route found them), failing over to another before the answer began.
// The caller admitted the request (admit). It reports whether it stopped because
// the body could not be read to its end (body.failed), having answered
// nothing: the caller answers why.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, c caller, model string, jobs []Model, body reqBody, stream bool, chain []uint64, strip bool) (bodyFailed bool) {
	setModel(w, model)

	var scaled []string
	for _, j := range jobs {
		if j.Autoscaled {
			scaled = append(scaled, j.JobID)
		}
	}
	lookup := func(fresh bool) []*replica {
		var rs []*replica
		for _, j := range jobs {
			get := p.replicas.get
			if fresh {
				get = p.replicas.refresh
			}
			got, err := get(r.Context(), j.JobID)
			if err != nil && r.Context().Err() == nil {
				p.log.Warn("look up replicas", "job_id", j.JobID, "err", err)
			}
			for _, rep := range got {
				if p.draining(rep) {
					continue // a rollout replaces it once its requests end
				}
				rs = append(rs, rep)
			}
		}
		return rs
	}
	rs := lookup(false)
	pool := p.poolFor(jobs[0].Runtime) // sameServing: the jobs have one runtime
	path := "/v1" + strings.TrimPrefix(r.URL.Path, Prefix)
	tried := map[*replica]bool{}
	lastErr := "no replica of the model is ready"
	wait := newReadyWait(p.cfg, stream)
	if len(scaled) > 0 {
		// A job that may be at zero replicas gets the time to wake one.
		wait.deadline = wait.start.Add(max(p.cfg.ReadyWait.D(), p.cfg.WakeWait.D()))
		wait.onWait = func(n int) {
			for _, id := range scaled {
				p.loads.wait(id, n)
			}
		}
	}
	defer wait.done(p.metrics.waiting)
	answered, failed := false, 0 // a replica answered 503; replicas tried in all
	for attempt := 0; ; {
		var rep *replica
		if chain != nil {
			var outcome string
			rep, outcome = p.prefixes.pickPrefix(rs, tried, chain)
			if rep != nil {
				p.prefixes.routed(chain, rep.key)
				p.metrics.prefix.WithLabelValues(model, outcome).Inc()
			}
		} else {
			rep = pick(rs, tried)
		}
		if rep == nil || attempt >= p.cfg.MaxAttempts {
			if answered {
				break // the runtimes answered and refused: that is their answer
			}
			// None is ready, or the ready ones could not be reached (one
			// that just turned ready may still be connecting to this
			// proxy): look again (one may have turned ready since the
			// cached answer), then wait for one, within ReadyWait.
			if !wait.next(w, r.Context(), p.metrics.waiting) {
				break
			}
			rs, tried, attempt = lookup(true), map[*replica]bool{}, 0
			continue
		}
		// A replica is found: the request waits no more (it is in flight
		// there, counted as such; a retry that waits again counts anew).
		wait.done(p.metrics.waiting)
		tried[rep] = true
		if failed > 0 {
			p.metrics.retries.WithLabelValues(model).Inc()
		}
		attempt++
		m := meter{strip: strip}
		done, refused, errText := p.try(w, r, pool, rep, path, body, &wait.committed, &m)
		if errText == errBodyFailed {
			return true
		}
		if done {
			if failed > 0 {
				p.metrics.failovers.WithLabelValues(model).Inc()
			}
			if m.status >= 200 && m.status < 300 {
				p.meter(c, jobs, rep.job, m.tokens)
			}
			return
		}
		failed++
		answered = answered || refused
		lastErr = errText
		if r.Context().Err() != nil {
			return // the client left
		}
	}
	if r.Context().Err() != nil {
		return
	}
	if failed == 0 {
		msg := fmt.Sprintf("no replica of the model `%s` is ready; retry", model)
		if wait.committed {
			writeSSEError(w, http.StatusServiceUnavailable, "no_ready_replica", msg)
			return
		}
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "no_ready_replica", msg)
		return
	}
	msg := fmt.Sprintf("the model's replicas failed to answer (%d tries): %s", failed, lastErr)
	if wait.committed {
		writeSSEError(w, http.StatusBadGateway, "replica_failed", msg)
		return
	}
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusBadGateway, "replica_failed", msg)
	return false
}

// readyWait paces a request's wait for a ready replica: the first look
// again is at once, then at a growing interval up to half a second, until
// ReadyWait has passed. A stream that waits longer than a second is
// answered 200 text/event-stream at once and gets an SSE comment every
// KeepAlive (clients and the gateway keep the connection, and the user
// sees it is waiting); it is then committed, and a failure is an error
// event, as vLLM sends one mid-stream.
type readyWait struct {
	start, deadline, nextComment time.Time
	keepAlive                    time.Duration
	stream, committed            bool
	first, counted               bool
	b                            backoff.Backoff
	// onWait, when set, is told when the request starts waiting (1) and
	// stops (-1): the autoscaled jobs' load.
	onWait func(n int)
}

func newReadyWait(cfg Config, stream bool) *readyWait {
	now := time.Now()
	return &readyWait{start: now, deadline: now.Add(cfg.ReadyWait.D()), nextComment: now.Add(time.Second), keepAlive: cfg.KeepAlive.D(),
		stream: stream, first: true, b: backoff.Backoff{Min: 20 * time.Millisecond, Max: 500 * time.Millisecond}}
}

// next waits for the time to look again and reports whether to; false
// once ReadyWait has passed or the client left.
func (rw *readyWait) next(w http.ResponseWriter, ctx context.Context, waiting prometheus.Gauge) bool {
	if rw.first {
		rw.first = false
		return true
	}
	now := time.Now()
	if !now.Before(rw.deadline) {
		return false
	}
	if !rw.counted {
		rw.counted = true
		waiting.Inc()
		if rw.onWait != nil {
			rw.onWait(1)
		}
	}
	d := min(rw.b.Next(), rw.deadline.Sub(now))
	if rw.stream {
		d = min(d, max(rw.nextComment.Sub(now), 0))
	}
	if !backoff.Sleep(ctx, d) {
		return false
	}
	if rw.stream && !time.Now().Before(rw.nextComment) {
		rw.comment(w)
	}
	return true
}

// done ends the wait's count in waiting.
func (rw *readyWait) done(waiting prometheus.Gauge) {
	if rw.counted {
		rw.counted = false
		waiting.Dec()
		if rw.onWait != nil {
			rw.onWait(-1)
		}
	}
}

// comment sends the waiting stream's keep-alive comment, answering 200
// text/event-stream the first time.
func (rw *readyWait) comment(w http.ResponseWriter) {
	rw.nextComment = time.Now().Add(rw.keepAlive)
	if !rw.committed {
		rw.committed = true
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
	}
	io.WriteString(w, ": waiting for a ready replica of the model\n\n")
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
}

// writeSSEError ends a committed stream with an error event and [DONE],
// the shape vLLM's server sends when a stream fails after it began.
func writeSSEError(w http.ResponseWriter, status int, code, msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": openAIType(status), "code": code, "param": nil}})
	fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", b)
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
}

// try sends the request to one replica. It reports done when the answer
// (or part of it) reached the client; otherwise nothing was written and the
// request may go to another replica.
//
// *committed says the client was already answered 200 text/event-stream
// (readyWait, or an earlier try's stream): the replica's status and headers
// are not the client's any more, so an answer that is not an event stream
// goes as an error event. try sets it when it passes on an event stream's
// head.
func (p *Proxy) try(w http.ResponseWriter, r *http.Request, pool *hop.Pool, rep *replica, path string, body reqBody, committed *bool, m *meter) (done, answered bool, errText string) {
	began := *committed // the head the client has is not this replica's
	rep.outstanding.Add(1)
	defer rep.outstanding.Add(-1)
	start := time.Now()
	out := body.request(r, "http://"+rep.host()+path)
	hop.CopyHeaders(out.Header, r.Header)
	// The caller's credentials stay here (the browser session's cookie
	// among them), and so do all cookies: the OpenAI API has none, and
	// a runtime is in a tenant's VM.
	apiv1.StripCredentials(out.Header)
	out.Header.Del("Cookie")
	resp, err := pool.Do(out, rep.host())
	if err != nil {
		if r.Context().Err() != nil {
			return true, false, ""
		}
		if body.failed != nil && body.failed() != nil {
			return false, false, errBodyFailed // the client's upload failed, not the replica
		}
		rep.observe(true, 0, err.Error())
		rep.markDown(p.cfg.DownFor.D())
		return false, false, err.Error()
	}
	// The connection goes back to the pool only after a clean end of the
	// answer; a cut one, or one the client left, is closed (which stops the
	// agent's and the runtime's work on it).
	rb := &eofReader{r: resp.Body}
	clean := false
	defer func() { resp.Finish(clean && rb.eof) }()
	if resp.StatusCode < 200 || resp.StatusCode > 599 {
		// Not an answer (a 101, or a code no server sends: the bytes come
		// from a tenant's VM): the replica failed; WriteHeader would panic
		// on a code below 100.
		msg := fmt.Sprintf("replica %d answered status %d", rep.meta.Load().Replica, resp.StatusCode)
		rep.observe(true, 0, msg)
		rep.markDown(p.cfg.DownFor.D())
		return false, false, msg
	}
	if resp.StatusCode == http.StatusServiceUnavailable { // the runtime is loading, or overloaded: try another
		b, _ := io.ReadAll(io.LimitReader(rb, 4096))
		clean = true
		msg := fmt.Sprintf("replica %d answered %d: %s", rep.meta.Load().Replica, resp.StatusCode, strings.TrimSpace(string(b)))
		rep.observe(true, 0, msg)
		return false, true, msg
	}
	// The answer may stream for minutes: each write, not the whole, is
	// bounded by the server's write limit.
	w = httpserve.Stream(w)
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	if !*committed && resp.StatusCode == http.StatusOK && sse {
		// An event stream's head goes on at once, as the runtime sent it:
		// the client has read it before the first event, which then costs
		// it one read, not a head to parse as well (docs/benchmarks.md,
		// "Inference on a real engine"). The stream is committed: a replica
		// that dies before its first event still fails over, its
		// successor's events following this head (forward).
		writeHead(w, rep, resp)
		http.NewResponseController(w).Flush()
		*committed = true
	}
	// Any other answer's headers are held back until the first byte of
	// its body: a replica that dies before it fails over unseen.
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	n, rerr := readSome(rb, buf)
	if n == 0 && rerr != nil && rerr != io.EOF {
		if r.Context().Err() != nil {
			return true, false, ""
		}
		rep.observe(true, 0, rerr.Error())
		rep.markDown(p.cfg.DownFor.D())
		return false, false, rerr.Error()
	}
	rep.observe(resp.StatusCode >= 500, time.Since(start), http.StatusText(resp.StatusCode))
	m.status = resp.StatusCode
	if *committed && (resp.StatusCode != http.StatusOK || !sse) {
		msg := strings.TrimSpace(string(buf[:n]))
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(buf[:n], &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		writeSSEError(w, resp.StatusCode, "replica_error", msg)
		return true, false, ""
	}
	if !*committed {
		writeHead(w, rep, resp)
	}
	fl, _ := w.(http.Flusher)
	if sse && fl != nil {
		if began {
			// The head named another replica, or none (readyWait): an SSE
			// comment, which clients skip, names the one that answers.
			io.WriteString(w, ": replica "+strconv.Itoa(rep.meta.Load().Replica)+"\n\n")
		}
		if err := copySSE(w, fl, rb, buf, n, rerr, m); err != nil && r.Context().Err() == nil {
			p.log.Debug("stream cut", "replica", rep.meta.Load().Replica, "err", err)
			panic(http.ErrAbortHandler) // tell the client the stream broke
		}
		clean = true
		return true, false, ""
	}
	tap := newAnswerTap(w)
	defer tap.release()
	if n > 0 {
		tap.Write(buf[:n])
	}
	if rerr == nil {
		if _, err := io.CopyBuffer(tap, rb, buf); err != nil && r.Context().Err() == nil {
			panic(http.ErrAbortHandler)
		}
	}
	m.tokens, _ = tap.usage()
	clean = true
	return true, false, ""
}

// writeHead answers the client with the replica's status and end-to-end
// headers, less what a runtime does not speak for, and names the replica
// (X-CosmicAC-Replica: the one that began the answer).
func writeHead(w http.ResponseWriter, rep *replica, resp *hop.Response) {
	h := w.Header()
	for k := range resp.Header {
		// The proxy's limits are the caller's (admit); a runtime
		// (a tenant's VM) does not speak for them.
		if len(k) > len("X-Ratelimit-") && strings.EqualFold(k[:len("X-Ratelimit-")], "X-Ratelimit-") {
			delete(resp.Header, k)
		}
	}
	hop.CopyHeaders(h, resp.Header)
	h.Del("Set-Cookie") // a runtime sets no cookie on the platform's origin
	h.Set("X-CosmicAC-Replica", strconv.Itoa(rep.meta.Load().Replica))
	w.WriteHeader(resp.StatusCode)
}

// errBodyFailed is try's errText when the request's body could not be
// read to its end.
const errBodyFailed = "the request body failed"

// eofReader records whether its reader reached a clean end.
type eofReader struct {
	r   io.Reader
	eof bool
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		e.eof = true
	}
	return n, err
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// readSome reads until it has at least one byte or an error.
func readSome(r io.Reader, buf []byte) (int, error) {
	for {
		n, err := r.Read(buf)
		if n > 0 || err != nil {
			return n, err
		}
	}
}

// copySSE writes an event stream through, one event (ending in a blank
// line) per write and flush: events are never held back nor joined. It
// reads the usage the events carry into m, and drops a usage-only chunk
// the client did not ask for (m.strip).
func copySSE(w io.Writer, fl http.Flusher, body io.Reader, buf []byte, n int, rerr error, m *meter) error {
	pending := make([]byte, 0, 4096)
	pending = append(pending, buf[:n]...)
	for {
		for {
			i := bytes.Index(pending, []byte("\n\n"))
			if i < 0 {
				break
			}
			ev := pending[:i+2]
			pending = pending[i+2:]
			if t, usageOnly, ok := sseUsage(ev); ok {
				m.tokens = t
				if usageOnly && m.strip {
					continue
				}
			}
			if _, err := w.Write(ev); err != nil {
				return nil // the client left
			}
			fl.Flush()
		}
		if len(pending) > 1<<20 { // no event boundary: pass it on as is
			w.Write(pending)
			fl.Flush()
			pending = pending[:0]
		}
		if rerr != nil {
			if t, _, ok := sseUsage(pending); ok {
				m.tokens = t
			}
			if len(pending) > 0 {
				w.Write(pending)
				fl.Flush()
			}
			if rerr == io.EOF {
				return nil
			}
			return rerr
		}
		n, rerr = body.Read(buf)
		pending = append(pending, buf[:n]...)
	}
}
