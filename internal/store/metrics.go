package store

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Metrics are the store's: how long each operation takes and how many
// fail, by implementation and operation.
//
//	cosmicac_store_op_duration_seconds{store,op}  histogram
//	cosmicac_store_errors_total{store,op}         counter
//
// An error counted is one that is not a domain answer: ErrNotFound,
// ErrConflict and ErrInvalid (an unknown job, a GPU already claimed, a
// bad name) are the store doing its job, and a canceled request is the
// caller's; everything else (the database unreachable, a disk full, a
// transaction aborted past its retries) counts.
type Metrics struct {
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
}

// NewMetrics makes the store's metrics; register them with the
// component's registry (Metrics is a prometheus.Collector).
func NewMetrics() *Metrics {
	return &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "cosmicac", Subsystem: "store", Name: "op_duration_seconds",
			Help:    "How long each store operation took, by implementation (sqlite, postgres) and operation.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}}, []string{"store", "op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cosmicac", Subsystem: "store", Name: "errors_total",
			Help: "Store operations that failed other than with a domain answer (not found, conflict, invalid) or the caller's cancellation."}, []string{"store", "op"}),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.duration.Describe(ch)
	m.errors.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.duration.Collect(ch)
	m.errors.Collect(ch)
}

// Full is what every implementation gives (database.DB): the store, the
// inference API keys, the sign-in limits and the datastores (and, through
// Store, the leases).
type Full interface {
	Store
	APIKeys
	SignInLimits
	Datastores
}

// Observed is a Full store whose every operation is timed and whose
// failures are counted in Metrics. An Update is one operation ("update"),
// whatever its function does through the Tx.
type Observed struct {
	s    Full
	name string
	m    *Metrics
}

var _ Full = (*Observed)(nil)

// Observe wraps s, named name (the implementation: "sqlite", "postgres")
// in the metrics' labels, with m.
func Observe(s Full, name string, m *Metrics) *Observed { return &Observed{s: s, name: name, m: m} }

// Unwrap returns the store observed.
func (o *Observed) Unwrap() Full { return o.s }

func (o *Observed) done(op string, start time.Time, err *error) {
	o.m.duration.WithLabelValues(o.name, op).Observe(time.Since(start).Seconds())
	if e := *err; e != nil && !errors.Is(e, cosmic.ErrNotFound) && !errors.Is(e, cosmic.ErrConflict) &&
		!errors.Is(e, cosmic.ErrInvalid) && !errors.Is(e, ErrNotLeader) && !errors.Is(e, context.Canceled) {
		o.m.errors.WithLabelValues(o.name, op).Inc()
	}
}

// Update implements Store, observed as one operation.
func (o *Observed) Update(ctx context.Context, fn func(tx Tx) error) (err error) {
	defer o.done("update", time.Now(), &err)
	return o.s.Update(ctx, fn)
}

// UpdateJob implements Store, observed.
func (o *Observed) UpdateJob(ctx context.Context, id string, fn func(j *cosmic.Job) error) (r0 cosmic.Job, err error) {
	defer o.done("update_job", time.Now(), &err)
	return o.s.UpdateJob(ctx, id, fn)
}

// CheckLease implements the interface, observed.
func (o *Observed) CheckLease(ctx context.Context, name string, epoch int64) (err error) {
	defer o.done("check_lease", time.Now(), &err)
	return o.s.CheckLease(ctx, name, epoch)
}

// AcquireLease implements Leases, observed.
func (o *Observed) AcquireLease(ctx context.Context, name string, h Holder, ttl time.Duration) (l Lease, err error) {
	defer o.done("acquire_lease", time.Now(), &err)
	return o.s.AcquireLease(ctx, name, h, ttl)
}

// RenewLease implements Leases, observed.
func (o *Observed) RenewLease(ctx context.Context, name, holder string, epoch int64, ttl time.Duration) (l Lease, err error) {
	defer o.done("renew_lease", time.Now(), &err)
	return o.s.RenewLease(ctx, name, holder, epoch, ttl)
}

// ReleaseLease implements Leases, observed.
func (o *Observed) ReleaseLease(ctx context.Context, name, holder string, epoch int64) (err error) {
	defer o.done("release_lease", time.Now(), &err)
	return o.s.ReleaseLease(ctx, name, holder, epoch)
}

// GetLease implements Leases, observed.
func (o *Observed) GetLease(ctx context.Context, name string) (l Lease, err error) {
	defer o.done("get_lease", time.Now(), &err)
	return o.s.GetLease(ctx, name)
}

// Close implements Store.
func (o *Observed) Close() error { return o.s.Close() }

// CreateJob implements the interface, observed.
func (o *Observed) CreateJob(ctx context.Context, j cosmic.Job) (err error) {
	defer o.done("create_job", time.Now(), &err)
	return o.s.CreateJob(ctx, j)
}

// GetJob implements the interface, observed.
func (o *Observed) GetJob(ctx context.Context, id string) (r0 cosmic.Job, err error) {
	defer o.done("get_job", time.Now(), &err)
	return o.s.GetJob(ctx, id)
}

// PutJob implements the interface, observed.
func (o *Observed) PutJob(ctx context.Context, j cosmic.Job) (err error) {
	defer o.done("put_job", time.Now(), &err)
	return o.s.PutJob(ctx, j)
}

// ListJobs implements the interface, observed.
func (o *Observed) ListJobs(ctx context.Context, q ListJobsQuery) (r0 []cosmic.Job, r1 int, err error) {
	defer o.done("list_jobs", time.Now(), &err)
	return o.s.ListJobs(ctx, q)
}

// DeleteJob implements the interface, observed.
func (o *Observed) DeleteJob(ctx context.Context, id string) (err error) {
	defer o.done("delete_job", time.Now(), &err)
	return o.s.DeleteJob(ctx, id)
}

// ClaimGPUs implements the interface, observed.
func (o *Observed) ClaimGPUs(ctx context.Context, r cosmic.Reservation) (err error) {
	defer o.done("claim_gpus", time.Now(), &err)
	return o.s.ClaimGPUs(ctx, r)
}

// Reservations implements the interface, observed.
func (o *Observed) Reservations(ctx context.Context) (r0 []cosmic.Reservation, err error) {
	defer o.done("reservations", time.Now(), &err)
	return o.s.Reservations(ctx)
}

// JobReservations implements the interface, observed.
func (o *Observed) JobReservations(ctx context.Context, jobID string) (r0 []cosmic.Reservation, err error) {
	defer o.done("job_reservations", time.Now(), &err)
	return o.s.JobReservations(ctx, jobID)
}

// ReleaseGPUs implements the interface, observed.
func (o *Observed) ReleaseGPUs(ctx context.Context, jobID string, replica int) (err error) {
	defer o.done("release_gpus", time.Now(), &err)
	return o.s.ReleaseGPUs(ctx, jobID, replica)
}

// PutRack implements the interface, observed.
func (o *Observed) PutRack(ctx context.Context, r Rack) (err error) {
	defer o.done("put_rack", time.Now(), &err)
	return o.s.PutRack(ctx, r)
}

// GetRack implements the interface, observed.
func (o *Observed) GetRack(ctx context.Context, id string) (r0 Rack, err error) {
	defer o.done("get_rack", time.Now(), &err)
	return o.s.GetRack(ctx, id)
}

// Racks implements the interface, observed.
func (o *Observed) Racks(ctx context.Context) (r0 []Rack, err error) {
	defer o.done("racks", time.Now(), &err)
	return o.s.Racks(ctx)
}

// DeleteRack implements the interface, observed.
func (o *Observed) DeleteRack(ctx context.Context, id string) (err error) {
	defer o.done("delete_rack", time.Now(), &err)
	return o.s.DeleteRack(ctx, id)
}

// CreateTeam implements the interface, observed.
func (o *Observed) CreateTeam(ctx context.Context, t cosmic.Team) (err error) {
	defer o.done("create_team", time.Now(), &err)
	return o.s.CreateTeam(ctx, t)
}

// GetTeam implements the interface, observed.
func (o *Observed) GetTeam(ctx context.Context, name string) (r0 cosmic.Team, err error) {
	defer o.done("get_team", time.Now(), &err)
	return o.s.GetTeam(ctx, name)
}

// ListTeams implements the interface, observed.
func (o *Observed) ListTeams(ctx context.Context) (r0 []cosmic.Team, err error) {
	defer o.done("list_teams", time.Now(), &err)
	return o.s.ListTeams(ctx)
}

// DeleteTeam implements the interface, observed.
func (o *Observed) DeleteTeam(ctx context.Context, name string) (err error) {
	defer o.done("delete_team", time.Now(), &err)
	return o.s.DeleteTeam(ctx, name)
}

// CreateUser implements the interface, observed.
func (o *Observed) CreateUser(ctx context.Context, u cosmic.User, passwordHash string) (err error) {
	defer o.done("create_user", time.Now(), &err)
	return o.s.CreateUser(ctx, u, passwordHash)
}

// GetUser implements the interface, observed.
func (o *Observed) GetUser(ctx context.Context, name string) (r0 cosmic.User, err error) {
	defer o.done("get_user", time.Now(), &err)
	return o.s.GetUser(ctx, name)
}

// ListUsers implements the interface, observed.
func (o *Observed) ListUsers(ctx context.Context) (r0 []cosmic.User, err error) {
	defer o.done("list_users", time.Now(), &err)
	return o.s.ListUsers(ctx)
}

// DeleteUser implements the interface, observed.
func (o *Observed) DeleteUser(ctx context.Context, name string) (err error) {
	defer o.done("delete_user", time.Now(), &err)
	return o.s.DeleteUser(ctx, name)
}

// SetPlatformAdmin implements the interface, observed.
func (o *Observed) SetPlatformAdmin(ctx context.Context, name string, admin bool) (err error) {
	defer o.done("set_platform_admin", time.Now(), &err)
	return o.s.SetPlatformAdmin(ctx, name, admin)
}

// PasswordHash implements the interface, observed.
func (o *Observed) PasswordHash(ctx context.Context, name string) (r0 string, err error) {
	defer o.done("password_hash", time.Now(), &err)
	return o.s.PasswordHash(ctx, name)
}

// SetPassword implements the interface, observed.
func (o *Observed) SetPassword(ctx context.Context, name, hash string) (err error) {
	defer o.done("set_password", time.Now(), &err)
	return o.s.SetPassword(ctx, name, hash)
}

// PutMember implements the interface, observed.
func (o *Observed) PutMember(ctx context.Context, m cosmic.Member) (err error) {
	defer o.done("put_member", time.Now(), &err)
	return o.s.PutMember(ctx, m)
}

// DeleteMember implements the interface, observed.
func (o *Observed) DeleteMember(ctx context.Context, team, user string) (err error) {
	defer o.done("delete_member", time.Now(), &err)
	return o.s.DeleteMember(ctx, team, user)
}

// Members implements the interface, observed.
func (o *Observed) Members(ctx context.Context, team string) (r0 []cosmic.Member, err error) {
	defer o.done("members", time.Now(), &err)
	return o.s.Members(ctx, team)
}

// Memberships implements the interface, observed.
func (o *Observed) Memberships(ctx context.Context, user string) (r0 []cosmic.Member, err error) {
	defer o.done("memberships", time.Now(), &err)
	return o.s.Memberships(ctx, user)
}

// CreateToken implements the interface, observed.
func (o *Observed) CreateToken(ctx context.Context, t Token) (err error) {
	defer o.done("create_token", time.Now(), &err)
	return o.s.CreateToken(ctx, t)
}

// TokenByHash implements the interface, observed.
func (o *Observed) TokenByHash(ctx context.Context, hash []byte, now time.Time) (r0 Token, r1 cosmic.User, err error) {
	defer o.done("token_by_hash", time.Now(), &err)
	return o.s.TokenByHash(ctx, hash, now)
}

// Credential implements the interface, observed.
func (o *Observed) Credential(ctx context.Context, hash []byte, now time.Time) (r0 Token, r1 cosmic.User, r2 []cosmic.Member, err error) {
	defer o.done("credential", time.Now(), &err)
	return o.s.Credential(ctx, hash, now)
}

// ListTokens implements the interface, observed.
func (o *Observed) ListTokens(ctx context.Context, user string, kind TokenKind) (r0 []Token, err error) {
	defer o.done("list_tokens", time.Now(), &err)
	return o.s.ListTokens(ctx, user, kind)
}

// GetToken implements the interface, observed.
func (o *Observed) GetToken(ctx context.Context, id string) (r0 Token, err error) {
	defer o.done("get_token", time.Now(), &err)
	return o.s.GetToken(ctx, id)
}

// TouchToken implements the interface, observed.
func (o *Observed) TouchToken(ctx context.Context, id string, t time.Time) (err error) {
	defer o.done("touch_token", time.Now(), &err)
	return o.s.TouchToken(ctx, id, t)
}

// DeleteToken implements the interface, observed.
func (o *Observed) DeleteToken(ctx context.Context, id string) (err error) {
	defer o.done("delete_token", time.Now(), &err)
	return o.s.DeleteToken(ctx, id)
}

// AppendAudit implements the interface, observed.
func (o *Observed) AppendAudit(ctx context.Context, r AuditRecord) (err error) {
	defer o.done("append_audit", time.Now(), &err)
	return o.s.AppendAudit(ctx, r)
}

// ListAudit implements the interface, observed.
func (o *Observed) ListAudit(ctx context.Context, q AuditQuery) (r0 []AuditRecord, r1 bool, err error) {
	defer o.done("list_audit", time.Now(), &err)
	return o.s.ListAudit(ctx, q)
}

// PruneAudit implements the interface, observed.
func (o *Observed) PruneAudit(ctx context.Context, before time.Time) (r0 int, err error) {
	defer o.done("prune_audit", time.Now(), &err)
	return o.s.PruneAudit(ctx, before)
}

// PutQuota implements the interface, observed.
func (o *Observed) PutQuota(ctx context.Context, q Quota) (err error) {
	defer o.done("put_quota", time.Now(), &err)
	return o.s.PutQuota(ctx, q)
}

// DeleteQuota implements the interface, observed.
func (o *Observed) DeleteQuota(ctx context.Context, team, location, gpuModel string) (err error) {
	defer o.done("delete_quota", time.Now(), &err)
	return o.s.DeleteQuota(ctx, team, location, gpuModel)
}

// ListQuotas implements the interface, observed.
func (o *Observed) ListQuotas(ctx context.Context, team string) (r0 []Quota, err error) {
	defer o.done("list_quotas", time.Now(), &err)
	return o.s.ListQuotas(ctx, team)
}

// RecordUsage implements the interface, observed.
func (o *Observed) RecordUsage(ctx context.Context, batch string, rows []UsageRow) (err error) {
	defer o.done("record_usage", time.Now(), &err)
	return o.s.RecordUsage(ctx, batch, rows)
}

// ListUsage implements the interface, observed.
func (o *Observed) ListUsage(ctx context.Context, q UsageQuery) (r0 []UsageRow, err error) {
	defer o.done("list_usage", time.Now(), &err)
	return o.s.ListUsage(ctx, q)
}

// CreateDatastore implements the interface, observed.
func (o *Observed) CreateDatastore(ctx context.Context, d Datastore) (err error) {
	defer o.done("create_datastore", time.Now(), &err)
	return o.s.CreateDatastore(ctx, d)
}

// ListDatastores implements the interface, observed.
func (o *Observed) ListDatastores(ctx context.Context, team string) (r0 []Datastore, err error) {
	defer o.done("list_datastores", time.Now(), &err)
	return o.s.ListDatastores(ctx, team)
}

// GetDatastore implements the interface, observed.
func (o *Observed) GetDatastore(ctx context.Context, team, alias string) (r0 Datastore, err error) {
	defer o.done("get_datastore", time.Now(), &err)
	return o.s.GetDatastore(ctx, team, alias)
}

// SetDatastoreCredentials implements the interface, observed.
func (o *Observed) SetDatastoreCredentials(ctx context.Context, team, alias, accessKey string, sealed []byte, at time.Time) (r0 Datastore, err error) {
	defer o.done("set_datastore_credentials", time.Now(), &err)
	return o.s.SetDatastoreCredentials(ctx, team, alias, accessKey, sealed, at)
}

// DeleteDatastore implements the interface, observed.
func (o *Observed) DeleteDatastore(ctx context.Context, team, alias string) (err error) {
	defer o.done("delete_datastore", time.Now(), &err)
	return o.s.DeleteDatastore(ctx, team, alias)
}

// CreateAPIKey implements the interface, observed.
func (o *Observed) CreateAPIKey(ctx context.Context, k APIKey) (err error) {
	defer o.done("create_apikey", time.Now(), &err)
	return o.s.CreateAPIKey(ctx, k)
}

// ListAPIKeys implements the interface, observed.
func (o *Observed) ListAPIKeys(ctx context.Context, team string) (r0 []APIKey, err error) {
	defer o.done("list_apikeys", time.Now(), &err)
	return o.s.ListAPIKeys(ctx, team)
}

// GetAPIKey implements the interface, observed.
func (o *Observed) GetAPIKey(ctx context.Context, id string) (r0 APIKey, err error) {
	defer o.done("get_apikey", time.Now(), &err)
	return o.s.GetAPIKey(ctx, id)
}

// APIKeyByHash implements the interface, observed.
func (o *Observed) APIKeyByHash(ctx context.Context, hash []byte) (r0 APIKey, err error) {
	defer o.done("apikey_by_hash", time.Now(), &err)
	return o.s.APIKeyByHash(ctx, hash)
}

// RotateAPIKey implements the interface, observed.
func (o *Observed) RotateAPIKey(ctx context.Context, id string, r APIKeyRotation) (r0 APIKey, err error) {
	defer o.done("rotate_apikey", time.Now(), &err)
	return o.s.RotateAPIKey(ctx, id, r)
}

// TouchAPIKey implements the interface, observed.
func (o *Observed) TouchAPIKey(ctx context.Context, id string, at time.Time) (err error) {
	defer o.done("touch_apikey", time.Now(), &err)
	return o.s.TouchAPIKey(ctx, id, at)
}

// DeleteAPIKey implements the interface, observed.
func (o *Observed) DeleteAPIKey(ctx context.Context, id string) (err error) {
	defer o.done("delete_apikey", time.Now(), &err)
	return o.s.DeleteAPIKey(ctx, id)
}

// TakeSignInAttempt implements the interface, observed.
func (o *Observed) TakeSignInAttempt(ctx context.Context, key string, now time.Time, every time.Duration, burst int) (r0 bool, r1 time.Duration, err error) {
	defer o.done("take_sign_in_attempt", time.Now(), &err)
	return o.s.TakeSignInAttempt(ctx, key, now, every, burst)
}
