// Package appnodetest holds hand-written fakes of the app-node's
// dependencies (an in-memory ork and accounts store) and a helper that
// serves the app-node over httptest, for the tests of the app-node, the
// client and the CLI.
//
// Importers: tests only.
package appnodetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
)

// Ork is an in-memory ork. It validates as the ork does what the tests
// need: specs (default, validate, known location), legal state moves,
// idempotent creates, and racks. It counts every call by method name.
type Ork struct {
	mu      sync.Mutex
	jobs    map[string]cosmic.Job
	racks   map[string]orkapi.RackInfo
	quotas  map[orkapi.QuotaRef]orkapi.Quota
	calls   map[string]int
	changes int
	err     error
	now     func() time.Time
}

var _ appnode.Ork = (*Ork)(nil)

// NewOrk returns an empty ork whose clock starts at 2026-01-01 and moves a
// millisecond per write, so that times are distinct and ordered.
func NewOrk() *Ork {
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return &Ork{
		jobs: map[string]cosmic.Job{}, racks: map[string]orkapi.RackInfo{}, calls: map[string]int{}, quotas: map[orkapi.QuotaRef]orkapi.Quota{},
		now: func() time.Time { t = t.Add(time.Millisecond); return t },
	}
}

// FailWith makes every later call fail with err (nil: succeed again).
func (o *Ork) FailWith(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.err = err
}

// Calls returns how many times method (an orkapi.Method* name) was called.
func (o *Ork) Calls(method string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls[method]
}

// Writes returns how many calls that may change something were made,
// whether or not they did.
func (o *Ork) Writes() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, m := range []string{orkapi.MethodCreateJob, orkapi.MethodDeleteJob, orkapi.MethodRestartJob,
		orkapi.MethodKillJob, orkapi.MethodLabelJob, orkapi.MethodSetRequireAuth, orkapi.MethodRegisterRack, orkapi.MethodForgetRacks,
		orkapi.MethodDeleteVolume} {
		n += o.calls[m]
	}
	return n
}

// Changes returns how many calls changed something.
func (o *Ork) Changes() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.changes
}

// Jobs returns how many jobs the ork holds.
func (o *Ork) Jobs() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.jobs)
}

// SetState moves a job to state, as a worker's report would.
func (o *Ork) SetState(id string, state cosmic.State, reason *cosmic.Reason) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	j, ok := o.jobs[id]
	if !ok {
		return fmt.Errorf("job %s: %w", id, cosmic.ErrNotFound)
	}
	if err := j.SetState(state, reason, o.now()); err != nil {
		return err
	}
	o.jobs[id] = j
	return nil
}

// SetReplicas gives a job's replicas states, by index, as workers'
// reports would.
func (o *Ork) SetReplicas(id string, states ...cosmic.State) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	j, ok := o.jobs[id]
	if !ok {
		return fmt.Errorf("job %s: %w", id, cosmic.ErrNotFound)
	}
	j.Status.Replicas = nil
	for i, s := range states {
		j.Status.Replicas = append(j.Status.Replicas, cosmic.ReplicaStatus{Index: i, State: s})
	}
	o.jobs[id] = j
	return nil
}

func (o *Ork) begin(method string) error {
	o.calls[method]++
	return o.err
}

func notFound(id string) error { return fabric.Errorf(fabric.CodeNotFound, "job %s not found", id) }

func conflict(err error) error { return fabric.Errorf(orkapi.CodeConflict, "%v", err) }

func clone(j cosmic.Job) cosmic.Job {
	j.Spec.Labels = maps(j.Spec.Labels)
	j.Status.History = slices.Clone(j.Status.History)
	return j
}

func maps(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// CreateJob defaults and validates the spec, refuses a location no rack
// serves (when racks are registered), and creates the job in state queued.
func (o *Ork) CreateJob(_ context.Context, p orkapi.CreateJobParams) (cosmic.Job, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin(orkapi.MethodCreateJob); err != nil {
		return cosmic.Job{}, err
	}
	id, err := cosmic.ParseJobID(p.ID)
	if err != nil || p.User == "" || p.Team == "" {
		return cosmic.Job{}, fabric.Errorf(fabric.CodeBadRequest, "id, user and team are required")
	}
	spec := p.Spec
	spec.Default()
	var fes []orkapi.FieldError
	for _, fe := range cosmic.FieldErrors(spec.Validate()) {
		fes = append(fes, orkapi.FieldError{Field: fe.Field, Message: fe.Message})
	}
	if len(o.racks) > 0 && !o.servesLocked(spec.Location) {
		fes = append(fes, orkapi.FieldError{Field: "location", Message: fmt.Sprintf("no rack in location %q", spec.Location)})
	}
	if len(fes) > 0 {
		return cosmic.Job{}, fabric.Errorf(orkapi.CodeInvalid, "%s: %s", fes[0].Field, fes[0].Message).WithDetails(fes)
	}
	if j, ok := o.jobs[id]; ok {
		return clone(j), nil
	}
	j := cosmic.NewJob(id, p.User, p.Team, spec, o.now())
	if err := j.SetState(cosmic.StateQueued, nil, o.now()); err != nil {
		return cosmic.Job{}, err
	}
	o.jobs[id] = j
	o.changes++
	return clone(j), nil
}

func (o *Ork) servesLocked(loc string) bool {
	for _, r := range o.racks {
		if r.Location == loc {
			return true
		}
	}
	return false
}

// GetJob returns a job.
func (o *Ork) GetJob(_ context.Context, id string) (cosmic.Job, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin(orkapi.MethodGetJob); err != nil {
		return cosmic.Job{}, err
	}
	j, ok := o.jobs[id]
	if !ok {
		return cosmic.Job{}, notFound(id)
	}
	return clone(j), nil
}

// ListJobs filters, sorts and pages as the ork does.
func (o *Ork) ListJobs(_ context.Context, p orkapi.ListJobsParams) (orkapi.ListJobsReply, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin(orkapi.MethodListJobs); err != nil {
		return orkapi.ListJobsReply{}, err
	}
	var out []*cosmic.Job
	for _, j := range o.jobs {
		switch {
		case p.Team != "" && j.Team != p.Team,
			p.User != "" && j.User != p.User,
			len(p.States) > 0 && !slices.Contains(p.States, j.Status.State),
			!p.UpdatedAfter.IsZero() && !j.UpdatedAt.After(p.UpdatedAfter),
			!p.UpdatedBefore.IsZero() && !j.UpdatedAt.Before(p.UpdatedBefore):
			continue
		}
		match := true
		for k, v := range p.Labels {
			if got, ok := j.Spec.Labels[k]; !ok || got != v {
				match = false
			}
		}
		if match {
			out = append(out, &j)
		}
	}
	cmp := func(a, b *cosmic.Job) int {
		switch p.Sort {
		case orkapi.SortUpdatedAt:
			return a.UpdatedAt.Compare(b.UpdatedAt)
		case orkapi.SortName:
			return strings.Compare(a.Spec.Name, b.Spec.Name)
		case orkapi.SortState:
			return strings.Compare(string(a.Status.State), string(b.Status.State))
		}
		return a.CreatedAt.Compare(b.CreatedAt)
	}
	slices.SortFunc(out, func(a, b *cosmic.Job) int {
		c := cmp(a, b)
		if c == 0 {
			c = strings.Compare(a.ID, b.ID)
		}
		if p.Order == "asc" {
			return c
		}
		return -c
	})
	size := p.Size
	if size == 0 {
		size = 50
	}
	total := len(out)
	lo := min(p.Page*size, total)
	hi := min(lo+size, total)
	page := make([]cosmic.Job, 0, hi-lo)
	for _, j := range out[lo:hi] {
		page = append(page, clone(*j))
	}
	return orkapi.ListJobsReply{Jobs: page, Total: total}, nil
}

// DeleteJob removes a job at once; a job holding GPUs needs Force. With
// Replica it marks the replica restarting (placed again).
func (o *Ork) DeleteJob(_ context.Context, p orkapi.DeleteJobParams) (cosmic.Job, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin(orkapi.MethodDeleteJob); err != nil {
		return cosmic.Job{}, err
	}
	j, ok := o.jobs[p.ID]
	if !ok {
		return cosmic.Job{}, notFound(p.ID)
	}
	if p.Replica != nil {
		return o.replicaLocked(j, *p.Replica)
	}
	if j.Status.State.HoldsGPUs() && !p.Force {
		return cosmic.Job{}, fabric.Errorf(orkapi.CodeConflict, "job %s is %s: kill it first or delete with force", p.ID, j.Status.State)
	}
	if err := j.SetState(cosmic.StateDeleting, nil, o.now()); err != nil {
		return cosmic.Job{}, conflict(err)
	}
	delete(o.jobs, p.ID)
	o.changes++
	return clone(j), nil
}

func (o *Ork) replicaLocked(j cosmic.Job, n int) (cosmic.Job, error) {
	if n < 0 || n >= j.Spec.Replicas() {
		return cosmic.Job{}, fabric.Errorf(fabric.CodeNotFound, "job %s has no replica %d", j.ID, n)
	}
	r := cosmic.NewReason(cosmic.ReasonRestartRequested, fmt.Sprintf("replica %d", n))
	if err := j.SetState(cosmic.StateRestarting, &r, o.now()); err != nil {
		return cosmic.Job{}, conflict(err)
	}
	o.jobs[j.ID] = j
	o.changes++
	return clone(j), nil
}

// RestartJob moves a running job to restarting and a failed or stopped one
// to queued; other states are a conflict.
func (o *Ork) RestartJob(_ context.Context, p orkapi.RestartJobParams) (cosmic.Job, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin(orkapi.MethodRestartJob); err != nil {
		return cosmic.Job{}, err
	}
	j, ok := o.jobs[p.ID]
	if !ok {
		return cosmic.Job{}, notFound(p.ID)
	}
	if p.Replica != nil {
		return o.replicaLocked(j, *p.Replica)
	}
	to := cosmic.StateRestarting
	if j.Status.State.Terminal() {
		to = cosmic.StateQueued
	}
	r := cosmic.NewReason(cosmic.ReasonRestartRequested, "")
	if err := j.SetState(to, &r, o.now()); err != nil {
		return cosmic.Job{}, conflict(err)
	}
	o.jobs[p.ID] = j
	o.changes++
	return clone(j), nil
}

// KillJob stops a job.
func (o *Ork) KillJob(_ context.Context, id string) (cosmic.Job, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin(orkapi.MethodKillJob); err != nil {
		return cosmic.Job{}, err
	}
	j, ok := o.jobs[id]
	if !ok {
		return cosmic.Job{}, notFound(id)
	}
	if j.Status.State == cosmic.StateStopped {
		return clone(j), nil // killing a stopped job is a no-op
	}
	r := cosmic.NewReason(cosmic.ReasonKilled, "")
	if err := j.SetState(cosmic.StateStopped, &r, o.now()); err != nil {
		return cosmic.Job{}, conflict(err)
	}
	o.jobs[id] = j
	o.changes++
	return clone(j), nil
}

// LabelJob sets or removes a label.
func (o *Ork) LabelJob(_ context.Context, p orkapi.LabelJobParams) (cosmic.Job, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin(orkapi.MethodLabelJob); err != nil {
		return cosmic.Job{}, err
	}
	j, ok := o.jobs[p.ID]
	if !ok {
		return cosmic.Job{}, notFound(p.ID)
	}
	if err := cosmic.ValidateLabel("name", p.Name, p.Value); err != nil {
		return cosmic.Job{}, fabric.Errorf(orkapi.CodeInvalid, "%v", err)
	}
	j.Spec.Labels = maps(j.Spec.Labels)
	if p.Value == "" {
		delete(j.Spec.Labels, p.Name)
	} else {
		if j.Spec.Labels == nil {
			j.Spec.Labels = map[string]string{}
		}
		j.Spec.Labels[p.Name] = p.Value
	}
	j.UpdatedAt = o.now()
	o.jobs[p.ID] = j
	o.changes++
	return clone(j), nil
}

// SetRequireAuth sets inference.requireAuth of a managed-inference job; any
// other job is a conflict.
func (o *Ork) SetRequireAuth(_ context.Context, p orkapi.SetRequireAuthParams) (cosmic.Job, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin(orkapi.MethodSetRequireAuth); err != nil {
		return cosmic.Job{}, err
	}
	j, ok := o.jobs[p.ID]
	if !ok {
		return cosmic.Job{}, notFound(p.ID)
	}
	if j.Spec.Type != cosmic.TypeManagedInference || j.Spec.Inference == nil {
		return cosmic.Job{}, fabric.Errorf(orkapi.CodeConflict, "job %s is a %s job: only a managed-inference job has \"require authorization\"", j.ID, j.Spec.Type)
	}
	in := *j.Spec.Inference
	in.RequireAuth = &p.RequireAuth
	j.Spec.Inference = &in
	j.UpdatedAt = o.now()
	o.jobs[p.ID] = j
	o.changes++
	return clone(j), nil
}

// RegisterRack registers or updates a rack with 2 nodes × 8 GPUs.
func (o *Ork) RegisterRack(_ context.Context, p orkapi.RegisterRackParams) (orkapi.RackInfo, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin(orkapi.MethodRegisterRack); err != nil {
		return orkapi.RackInfo{}, err
	}
	if err := p.Rack.Validate(); err != nil {
		return orkapi.RackInfo{}, fabric.Errorf(orkapi.CodeInvalid, "%v", err)
	}
	ri, ok := o.racks[p.ID]
	if !ok {
		p.CreatedAt = o.now()
		ri = orkapi.RackInfo{Rack: p.Rack, GPUs: 16, FreeGPUs: 16, Reachable: true}
		for i := range 2 {
			ri.Nodes = append(ri.Nodes, cosmic.Node{Name: fmt.Sprintf("%s-n%d", p.ID, i), Rack: p.ID,
				GPUModel: p.GPUModel, GPUs: 8, Schedulable: true, Ready: true, FreeGPUs: 8})
		}
	} else {
		p.CreatedAt = ri.CreatedAt
		ri.Rack = p.Rack
	}
	ri.WorkerAddrs = p.WorkerAddrs
	o.racks[p.ID] = ri
	o.changes++
	return ri, nil
}

// ListRacks lists the racks by ID.
func (o *Ork) ListRacks(context.Context) (orkapi.ListRacksReply, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin(orkapi.MethodListRacks); err != nil {
		return orkapi.ListRacksReply{}, err
	}
	out := orkapi.ListRacksReply{Racks: []orkapi.RackInfo{}}
	for _, r := range o.racks {
		out.Racks = append(out.Racks, r)
	}
	sort.Slice(out.Racks, func(a, b int) bool { return out.Racks[a].ID < out.Racks[b].ID })
	return out, nil
}

// KeepVolume makes rack id (registered) report a standalone volume.
func (o *Ork) KeepVolume(id string, v cosmic.StoredVolume) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.racks[id]
	v.Rack = id
	r.Volumes = append(r.Volumes, v)
	o.racks[id] = r
}

// DeleteVolume removes a volume a rack keeps (KeepVolume); one a job has
// is a conflict, one no rack keeps not found.
func (o *Ork) DeleteVolume(_ context.Context, p orkapi.VolumeRef) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin(orkapi.MethodDeleteVolume); err != nil {
		return err
	}
	for id, r := range o.racks {
		i := slices.IndexFunc(r.Volumes, func(v cosmic.StoredVolume) bool { return v.Team == p.Team && v.Name == p.Name })
		if i < 0 {
			continue
		}
		if job := r.Volumes[i].Job; job != "" {
			return fmt.Errorf("%w: volume %s is mounted by job %s", cosmic.ErrConflict, p.Name, job)
		}
		r.Volumes = slices.Delete(slices.Clone(r.Volumes), i, i+1)
		o.racks[id] = r
		o.changes++
		return nil
	}
	return fmt.Errorf("%w: team %s has no volume %s", cosmic.ErrNotFound, p.Team, p.Name)
}

// ForgetRacks removes racks; unknown IDs are not found.
func (o *Ork) ForgetRacks(_ context.Context, p orkapi.ForgetRacksParams) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin(orkapi.MethodForgetRacks); err != nil {
		return err
	}
	for _, id := range p.IDs {
		if _, ok := o.racks[id]; !ok {
			return fabric.Errorf(fabric.CodeNotFound, "rack %s not found", id)
		}
	}
	for _, id := range p.IDs {
		delete(o.racks, id)
	}
	o.changes++
	return nil
}

// NewAccounts returns an empty accounts store: a real SQLite database in
// a directory of the test's, closed when the test ends. The database
// starts as a copy of one migrated once per test binary (emptyAccounts):
// migrating is most of the cost of a fresh store under -race, and the
// access matrices open hundreds. sqlite.Open still runs on the copy, so a
// store here is opened exactly as cosmicac opens one it finds on disk.
func NewAccounts(tb testing.TB) *sqlite.Store {
	tb.Helper()
	db, err := emptyAccounts()
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(tb.TempDir(), "accounts.db")
	if err := os.WriteFile(path, db, 0o600); err != nil {
		tb.Fatal(err)
	}
	st, err := sqlite.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// emptyAccounts is the file of a freshly migrated, closed SQLite store
// (closing checkpoints the write-ahead log into it), made on first use.
var emptyAccounts = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "cosmicac-accounts-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "accounts.db")
	st, err := sqlite.Open(path)
	if err != nil {
		return nil, err
	}
	if err := st.Close(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(path + "-wal"); err == nil {
		return nil, fmt.Errorf("template accounts store: %s-wal left after close", path)
	}
	return os.ReadFile(path)
})

// Env is an app-node served over httptest with fake dependencies and an
// admin bootstrapped. Its accounts keep the inference API keys too, as
// both assemblies' do; its shells are none until SetShells.
type Env struct {
	Server     *httptest.Server
	App        *appnode.Server
	Ork        *Ork
	Accounts   *sqlite.Store
	AdminToken string
	DataDir    string
	shells     *swapShells
}

// SetShells makes sh the app-node's way to the jobs' agents from now on
// (nil: none, the shell routes answer 503).
func (e *Env) SetShells(sh appnode.Shells) {
	e.shells.mu.Lock()
	e.shells.sh = sh
	e.shells.mu.Unlock()
}

// swapShells is the app-node's Shells of an Env: the one a test sets.
type swapShells struct {
	mu sync.Mutex
	sh appnode.Shells
}

func (s *swapShells) get() (appnode.Shells, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sh == nil {
		return nil, fabric.Errorf(fabric.CodeUnavailable, "appnodetest: no shells set")
	}
	return s.sh, nil
}

func (s *swapShells) DialShell(ctx context.Context, job cosmic.Job, replica int, p shellproto.OpenParams) (agentapi.Conn, shellproto.OpenReply, error) {
	sh, err := s.get()
	if err != nil {
		return nil, shellproto.OpenReply{}, err
	}
	return sh.DialShell(ctx, job, replica, p)
}

func (s *swapShells) DataSync(ctx context.Context, job cosmic.Job, replica int, p agentapi.DataSyncParams) (agentapi.DataSyncReply, error) {
	sh, err := s.get()
	if err != nil {
		return agentapi.DataSyncReply{}, err
	}
	if ds, ok := sh.(appnode.DataSyncer); ok {
		return ds.DataSync(ctx, job, replica, p)
	}
	return agentapi.DataSyncReply{}, appnode.ErrNoDataSync
}

func (s *swapShells) LastDataSync(ctx context.Context, job cosmic.Job, replica int) (*agentapi.DataSyncStatus, error) {
	sh, err := s.get()
	if err != nil {
		return nil, err
	}
	if ds, ok := sh.(appnode.DataSyncer); ok {
		return ds.LastDataSync(ctx, job, replica)
	}
	return nil, appnode.ErrNoDataSync
}

func (s *swapShells) DialTCP(ctx context.Context, job cosmic.Job, replica int, port int) (agentapi.Conn, error) {
	sh, err := s.get()
	if err != nil {
		return nil, err
	}
	return sh.DialTCP(ctx, job, replica, port)
}

// URL is the server's base URL.
func (e *Env) URL() string { return e.Server.URL }

// NewEnv starts an app-node with fresh fakes and bootstraps its admin.
// The server is closed when the test ends. Logs are discarded unless
// COSMICAC_TEST_LOG is set.
func NewEnv(tb testing.TB) *Env {
	tb.Helper()
	return NewEnvConfig(tb, nil)
}

// NewEnvConfig is NewEnv with the app-node's config changed by tune.
func NewEnvConfig(tb testing.TB, tune func(*appnode.Config)) *Env {
	tb.Helper()
	e := &Env{Ork: NewOrk(), Accounts: NewAccounts(tb), DataDir: tb.TempDir(), shells: &swapShells{}}
	cfg := appnode.DefaultConfig()
	cfg.DataDir = e.DataDir
	if tune != nil {
		tune(&cfg)
	}
	app, err := appnode.New(cfg, appnode.Deps{Ork: e.Ork, Accounts: e.Accounts, APIKeys: e.Accounts, Usage: e.Accounts, Datastores: e.Accounts, Shells: e.shells,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	path, created, err := app.Bootstrap(context.Background())
	if err != nil || !created {
		tb.Fatalf("bootstrap: created %v, err %v", created, err)
	}
	b, err := readFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	e.App, e.AdminToken = app, strings.TrimSpace(b)
	e.Server = httptest.NewServer(app.Handler())
	tb.Cleanup(e.Server.Close)
	return e
}

// AddUser creates a user (and its team if needed) with role in team and
// returns a token of it.
func (e *Env) AddUser(tb testing.TB, name, team string, role cosmic.Role) string {
	tb.Helper()
	return AddUser(tb, e.Accounts, name, team, role)
}

// AddUser creates a user in acc (and its team if needed) with role in team
// and returns a token of it; a user who exists is only added to the team.
func AddUser(tb testing.TB, acc store.Accounts, name, team string, role cosmic.Role) string {
	tb.Helper()
	ctx := context.Background()
	if err := acc.CreateTeam(ctx, cosmic.Team{Name: team}); err != nil && !errors.Is(err, cosmic.ErrConflict) {
		tb.Fatal(err)
	}
	if err := acc.CreateUser(ctx, cosmic.User{Name: name}, ""); err != nil && !errors.Is(err, cosmic.ErrConflict) {
		tb.Fatal(err)
	}
	if err := acc.PutMember(ctx, cosmic.Member{Team: team, User: name, Role: role}); err != nil {
		tb.Fatal(err)
	}
	return AddToken(tb, acc, store.Token{UserName: name, Name: name})
}

// AddToken stores a token shaped like t (its ID, hash and times are made
// here) and returns its secret.
func AddToken(tb testing.TB, acc store.Accounts, t store.Token) string {
	tb.Helper()
	secret, hash, err := appnode.NewToken()
	if err != nil {
		tb.Fatal(err)
	}
	if t.ID, err = appnode.NewTokenID(); err != nil {
		tb.Fatal(err)
	}
	t.Hash, t.CreatedAt, t.Kind = hash, time.Now().UTC(), store.KindToken
	if err := acc.CreateToken(context.Background(), t); err != nil {
		tb.Fatal(err)
	}
	return secret
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

// WatchJobs answers the version at once, without holding the call: it is
// the number of changes made (Changes). The real ork holds a watch until a
// change (internal/ork's TestWatchJobs).
func (o *Ork) WatchJobs(context.Context, orkapi.WatchJobsParams) (orkapi.JobsVersion, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin(orkapi.MethodWatchJobs); err != nil {
		return orkapi.JobsVersion{}, err
	}
	return orkapi.JobsVersion{Epoch: "appnodetest", Version: uint64(o.changes)}, nil
}

// SetQuota keeps a quota (nothing is admitted by it: the fake places no
// jobs; internal/ork tests admission).
func (o *Ork) SetQuota(_ context.Context, p orkapi.SetQuotaParams) (orkapi.Quota, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin(orkapi.MethodSetQuota); err != nil {
		return orkapi.Quota{}, err
	}
	q := orkapi.Quota{Team: p.Team, Location: p.Location, GPUModel: p.GPUModel, GPUs: p.GPUs, UpdatedAt: o.now(), UpdatedBy: p.By}
	o.quotas[orkapi.QuotaRef{Team: p.Team, Location: p.Location, GPUModel: p.GPUModel}] = q
	return q, nil
}

// DeleteQuota removes a quota.
func (o *Ork) DeleteQuota(_ context.Context, p orkapi.QuotaRef) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin(orkapi.MethodDeleteQuota); err != nil {
		return err
	}
	if _, ok := o.quotas[p]; !ok {
		return fabric.Errorf(fabric.CodeNotFound, "no quota of team %s in %s", p.Team, p.Location)
	}
	delete(o.quotas, p)
	return nil
}

// ListQuotas lists a team's quotas (every team's with Team empty).
func (o *Ork) ListQuotas(_ context.Context, p orkapi.ListQuotasParams) (orkapi.ListQuotasReply, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin(orkapi.MethodListQuotas); err != nil {
		return orkapi.ListQuotasReply{}, err
	}
	out := orkapi.ListQuotasReply{Quotas: []orkapi.Quota{}}
	for _, q := range o.quotas {
		if p.Team == "" || q.Team == p.Team {
			out.Quotas = append(out.Quotas, q)
		}
	}
	sort.Slice(out.Quotas, func(a, b int) bool {
		x, y := out.Quotas[a], out.Quotas[b]
		return x.Team+"/"+x.Location+"/"+x.GPUModel < y.Team+"/"+y.Location+"/"+y.GPUModel
	})
	return out, nil
}
