package inferproxy

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/inferproxy/keyapi"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/store"
)

// Model is one served model: a managed-inference job and the name clients
// ask for.
type Model struct {
	// Name is the served model name (inference.servedModelName, else the
	// model id).
	Name  string
	JobID string
	// Team owns the job; its API keys reach the model by Name.
	Team string
	// RequireAuth off makes the model reachable by everyone, with or
	// without a key, by its full name (FullName).
	RequireAuth bool
	Runtime     cosmic.Runtime
	// ModelID is the Hugging Face id the job serves.
	ModelID string
	Created time.Time
	// State is the job's state; "" (a StaticCatalog's) is taken as running.
	State cosmic.State
	// Routing is how a replica is picked ("": cosmic.DefaultRouting).
	Routing cosmic.Routing
	// Adapters are the names of the job's LoRA adapters, in the order its
	// runtime loaded them: a caller asks for NAME:ADAPTER.
	Adapters []string
	// Autoscaled says the ork sizes the job to its load (and it may have
	// no replica now): its requests are counted and reported, and wait up
	// to Config.WakeWait for a replica.
	Autoscaled bool
}

// FullName is how anyone calls an open model: "@TEAM/NAME". No served
// name starts with '@' (cosmic.ValidServedModelName), so a full name never
// reads as a team's own bare name, and no team can take another's.
func (m Model) FullName() string { return "@" + m.Team + "/" + m.Name }

// serving reports whether the model's replicas answer, or will without an
// action (the job is queued, starting, restarting, ...).
func (m Model) serving() bool { return m.State == "" || slices.Contains(servingStates, m.State) }

// Catalog says which models exist and who owns them. It is all the proxy
// needs to know of jobs; OrkCatalog answers from the ork's job list, and a
// test can answer from a slice (StaticCatalog).
type Catalog interface {
	// Models lists the models whose replicas serve, or will without an
	// action (queued, starting, restarting, ...).
	Models(ctx context.Context) ([]Model, error)
	// Down lists team's models that do not serve and will not without an
	// action (stopped, failed, being deleted): a request of the team for
	// one of these is told its own model is down, instead of being
	// answered "no such model" (or, before, by another team's model of
	// the same name). It is read only on such a miss.
	Down(ctx context.Context, team string) ([]Model, error)
}

// StaticCatalog is a fixed list of models.
type StaticCatalog []Model

// Models implements Catalog.
func (s StaticCatalog) Models(context.Context) ([]Model, error) {
	return slices.DeleteFunc(slices.Clone(s), func(m Model) bool { return !m.serving() }), nil
}

// Down implements Catalog.
func (s StaticCatalog) Down(_ context.Context, team string) ([]Model, error) {
	return slices.DeleteFunc(slices.Clone(s), func(m Model) bool { return m.Team != team || m.serving() }), nil
}

// JobLister is the part of the ork's client (*orkapi.Client) OrkCatalog uses.
type JobLister interface {
	ListJobs(ctx context.Context, p orkapi.ListJobsParams) (orkapi.ListJobsReply, error)
}

var _ JobLister = (*orkapi.Client)(nil)

// OrkCatalog lists the managed-inference jobs the ork has in a state where
// replicas serve or will (queued, pending, starting, running, degraded,
// restarting, unknown): a request for a model whose job is still queued
// or starting waits for a replica (Config.ReadyWait) instead of being told
// the model does not exist.
type OrkCatalog struct{ Ork JobLister }

// downStates are the job states whose replicas do not serve, and will not
// without an action.
var downStates = []cosmic.State{cosmic.StateStopped, cosmic.StateFailed, cosmic.StateDeleting}

// servingStates are the job states whose replicas answer, or will.
var servingStates = []cosmic.State{cosmic.StateCreating, cosmic.StateQueued, cosmic.StatePending, cosmic.StateStarting, cosmic.StateRunning,
	cosmic.StateDegraded, cosmic.StateRestarting, cosmic.StateUnknown}

// Models implements Catalog.
func (c OrkCatalog) Models(ctx context.Context) ([]Model, error) {
	return c.list(ctx, orkapi.ListJobsParams{States: servingStates})
}

// Down implements Catalog.
func (c OrkCatalog) Down(ctx context.Context, team string) ([]Model, error) {
	return c.list(ctx, orkapi.ListJobsParams{Team: team, States: downStates})
}

func (c OrkCatalog) list(ctx context.Context, q orkapi.ListJobsParams) ([]Model, error) {
	var out []Model
	q.Size = 1000
	for q.Page = 0; ; q.Page++ {
		r, err := c.Ork.ListJobs(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, ModelsOf(r.Jobs)...)
		if (q.Page+1)*q.Size >= r.Total || len(r.Jobs) == 0 {
			return out, nil
		}
	}
}

// ModelsOf picks the managed-inference jobs of jobs as models.
func ModelsOf(jobs []cosmic.Job) []Model {
	var out []Model
	for _, j := range jobs {
		in := j.Spec.Inference
		if j.Spec.Type != cosmic.TypeManagedInference || in == nil {
			continue
		}
		out = append(out, Model{Name: in.ServedName(), JobID: j.ID, Team: j.Team,
			RequireAuth: in.AuthRequired(), Runtime: in.Runtime, ModelID: in.Model, Created: j.CreatedAt, State: j.Status.State, Routing: in.Routing, Adapters: adapterNames(in), Autoscaled: in.Autoscaling != nil})
	}
	return out
}

// cachedCatalog keeps a Catalog's answer for ttl, and reads it again
// ahead of that (readAhead) while requests come, so that none waits for
// the read.
type cachedCatalog struct {
	c   Catalog
	ttl time.Duration
	bg  *background

	load sync.Mutex // held by a read of c: reads run one at a time

	mu    sync.Mutex // guards what follows
	at    time.Time  // when the read that gave list and err began
	list  []Model
	err   error
	ahead bool // a read ahead runs
}

// Down reads c's catalog, uncached: it is read only on a miss, which the
// caller's limits bound.
func (c *cachedCatalog) Down(ctx context.Context, team string) ([]Model, error) {
	return c.c.Down(ctx, team)
}

// Models answers the list read within ttl. One past aheadAt of it starts a
// read in the background, which the requests after it get.
func (c *cachedCatalog) Models(ctx context.Context) ([]Model, error) {
	now := time.Now()
	c.mu.Lock()
	due := !c.ahead && c.err == nil && dueAhead(c.at, now, c.ttl)
	c.ahead = c.ahead || due // stays set once the proxy is closed: no read ahead then
	fresh, list, err := !c.at.Before(now.Add(-c.ttl)), c.list, c.err
	c.mu.Unlock()
	if due {
		c.bg.Go(c.readAhead)
	}
	if fresh {
		return list, err
	}
	return c.models(ctx, now.Add(-c.ttl))
}

// readAhead reads the list before it expires, unless a read runs.
func (c *cachedCatalog) readAhead(ctx context.Context) {
	defer func() {
		c.mu.Lock()
		c.ahead = false
		c.mu.Unlock()
	}()
	if !c.load.TryLock() {
		return
	}
	defer c.load.Unlock()
	c.read(ctx)
}

// fresh is Models from a read begun now or later: a request naming a
// model the cached list does not have reads again before answering 404,
// for the job may have been created since. Reads stay one at a time (the
// cache's lock), and a caller's misses are bounded by its key's limits.
func (c *cachedCatalog) fresh(ctx context.Context) ([]Model, error) {
	return c.models(ctx, time.Now())
}

// cached is the list if it was read at notBefore or later.
func (c *cachedCatalog) cached(notBefore time.Time) ([]Model, error, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.Before(notBefore) {
		return nil, nil, false
	}
	return c.list, c.err, true
}

// models answers the list read at notBefore or later, reading it anew if
// the cached one is older (or waiting for the read that runs).
func (c *cachedCatalog) models(ctx context.Context, notBefore time.Time) ([]Model, error) {
	if ms, err, ok := c.cached(notBefore); ok {
		return ms, err
	}
	c.load.Lock()
	defer c.load.Unlock()
	if ms, err, ok := c.cached(notBefore); ok { // read meanwhile
		return ms, err
	}
	return c.read(ctx)
}

// read reads the list; c.load is held.
func (c *cachedCatalog) read(ctx context.Context) ([]Model, error) {
	began := time.Now()
	ms, err := c.c.Models(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil && c.list != nil {
		// Keep serving the last good list while the ork is away.
		return c.list, nil
	}
	c.list, c.err, c.at = ms, err, began
	return ms, err
}

// A name resolves as follows (docs/inference.md, "Model names"):
//
//   - a bare name ("Qwen/Qwen3-8B") names a model of the caller's own team,
//     and nothing else: a caller without a key has no bare names, and a
//     team whose model is down is told so, never answered by another
//     team's model of the same name;
//   - a full name ("@ml/Qwen/Qwen3-8B") names team ml's model
//     "Qwen/Qwen3-8B", which the caller reaches if it is of team ml or the
//     model is open (requireAuth off).
//
// So an open model is called by anyone by its full name, and no team can
// take the traffic meant for another's.

// callable returns the models the caller may call by name, each under the
// name it calls it by (its bare name for its own team's, its full name for
// another team's open ones), serving or not.
func callable(ms []Model, c caller) []named {
	var out []named
	for _, m := range ms {
		name := ""
		switch {
		case c.team != "" && m.Team == c.team:
			name = m.Name
		case !m.RequireAuth:
			name = m.FullName()
		default:
			continue
		}
		out = append(out, named{name, m})
		for _, a := range m.Adapters {
			out = append(out, named{name + ":" + a, m})
		}
	}
	return out
}

// adapterNames are in's adapters' names, in order.
func adapterNames(in *cosmic.InferenceSpec) []string {
	var out []string
	for _, a := range in.Adapters {
		out = append(out, a.Name)
	}
	return out
}

// named is a model under the name a caller calls it by.
type named struct {
	name  string
	model Model
}

// resolveWithAdapter is resolve, and where name names no model, a model's
// LoRA adapter: NAME:ADAPTER names the jobs serving NAME that have the
// adapter ADAPTER (a served name may hold colons of its own: a whole name
// that names a model is that model).
func resolveWithAdapter(ms []Model, c caller, name string) (jobs []Model, adapter string) {
	if jobs, _ = resolve(ms, c, name); len(jobs) > 0 {
		return jobs, ""
	}
	i := strings.LastIndexByte(name, ':')
	if i <= 0 || i == len(name)-1 {
		return nil, ""
	}
	base, adapter := name[:i], name[i+1:]
	jobs, _ = resolve(ms, c, base)
	jobs = slices.DeleteFunc(jobs, func(m Model) bool { return !slices.Contains(m.Adapters, adapter) })
	if len(jobs) == 0 {
		return nil, ""
	}
	return jobs, adapter
}

// resolve returns the jobs of ms serving name to the caller (oldest
// first), and those of ms it names that do not serve now (down).
func resolve(ms []Model, c caller, name string) (jobs, down []Model) {
	team, bare := c.team, name
	if rest, ok := strings.CutPrefix(name, "@"); ok {
		var found bool
		if team, bare, found = strings.Cut(rest, "/"); !found || team == "" || bare == "" {
			return nil, nil
		}
	}
	if team == "" {
		return nil, nil
	}
	for _, m := range ms {
		if m.Team != team || m.Name != bare || (m.Team != c.team && m.RequireAuth) {
			continue
		}
		if m.serving() {
			jobs = append(jobs, m)
		} else {
			down = append(down, m)
		}
	}
	slices.SortFunc(jobs, func(a, b Model) int { return a.Created.Compare(b.Created) })
	return jobs, down
}

// ---- API keys

// Keys finds API keys by the hash of their secret; *sqlite.Store
// implements it (store.APIKeys).
type Keys interface {
	APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, error)
}

// keyCache remembers looked-up keys briefly, so a request costs no store
// read; a revoked key stops working within keyTTL (1 s by default). The
// times of a key (its expiry, a rotated secret's grace) are checked at
// every use, not only when it is read (APIKey.ValidFor).
type keyCache struct {
	keys Keys
	ttl  time.Duration
	now  func() time.Time // time.Now; a test's clock
	bg   *background      // reads keys ahead of their expiry (nil: never)

	mu sync.Mutex
	m  map[string]keyEntry
}

type keyEntry struct {
	k     store.APIKey
	ok    bool
	at    time.Time // when it was read
	exp   time.Time
	ahead bool // a read ahead runs
}

// keyToucher is the store's TouchAPIKey (store.APIKeys): where the proxy
// reads keys from the store itself (cosmicac up), it records their use; over
// the fabric the app-node does it when it is asked (appnode.ServeKeyLookup).
type keyToucher interface {
	TouchAPIKey(ctx context.Context, id string, at time.Time) error
}

// lookup returns the key whose secret (or previous secret) is secret, the
// secret's hash, and whether there is one; it does not check the key's
// times. A key past aheadAt of its TTL is read again in the background
// (ahead.go) while the request goes on with it.
func (c *keyCache) lookup(ctx context.Context, secret string) (store.APIKey, []byte, bool, error) {
	hash := keyapi.HashKey(secret)
	hk := string(hash)
	now := c.now()
	c.mu.Lock()
	e, hit := c.m[hk]
	due := hit && !e.ahead && dueAhead(e.at, now, c.ttl)
	if due {
		e.ahead = true
		c.m[hk] = e
	}
	c.mu.Unlock()
	if hit && now.Before(e.exp) {
		if due { // once the proxy is closed nothing runs, and the flag stays
			c.bg.Go(func(ctx context.Context) { c.read(ctx, hash) })
		}
		return e.k, hash, e.ok, nil
	}
	e, err := c.read(ctx, hash)
	if err != nil {
		return store.APIKey{}, nil, false, err
	}
	return e.k, hash, e.ok, nil
}

// read reads the key of hash and caches what it found.
func (c *keyCache) read(ctx context.Context, hash []byte) (keyEntry, error) {
	now := c.now()
	k, err := c.keys.APIKeyByHash(ctx, hash)
	var e keyEntry
	switch {
	case err == nil:
		e = keyEntry{k: k, ok: true, at: now, exp: now.Add(c.ttl)}
		if t, ok := c.keys.(keyToucher); ok && now.Sub(k.LastUsedAt) >= store.TouchEvery {
			// At most once a minute per key: one request then pays a write.
			if err := t.TouchAPIKey(ctx, k.ID, now); err == nil {
				e.k.LastUsedAt = now
			}
		}
	case isNotFound(err):
		e = keyEntry{at: now, exp: now.Add(c.ttl)}
	default:
		c.mu.Lock()
		if e, ok := c.m[string(hash)]; ok && e.ahead {
			e.ahead = false // the next request past aheadAt tries again
			c.m[string(hash)] = e
		}
		c.mu.Unlock()
		return keyEntry{}, err
	}
	c.mu.Lock()
	if len(c.m) > 100000 {
		clear(c.m)
	}
	c.m[string(hash)] = e
	c.mu.Unlock()
	return e, nil
}
