package appnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/authz"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/httpserve"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/seal"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/version"
)

// Ork is what the app-node asks of the ork; *orkapi.Client implements it.
type Ork interface {
	CreateJob(ctx context.Context, p orkapi.CreateJobParams) (cosmic.Job, error)
	GetJob(ctx context.Context, id string) (cosmic.Job, error)
	ListJobs(ctx context.Context, p orkapi.ListJobsParams) (orkapi.ListJobsReply, error)
	DeleteJob(ctx context.Context, p orkapi.DeleteJobParams) (cosmic.Job, error)
	RestartJob(ctx context.Context, p orkapi.RestartJobParams) (cosmic.Job, error)
	KillJob(ctx context.Context, id string) (cosmic.Job, error)
	LabelJob(ctx context.Context, p orkapi.LabelJobParams) (cosmic.Job, error)
	RegisterRack(ctx context.Context, p orkapi.RegisterRackParams) (orkapi.RackInfo, error)
	ListRacks(ctx context.Context) (orkapi.ListRacksReply, error)
	ForgetRacks(ctx context.Context, p orkapi.ForgetRacksParams) error
	DeleteVolume(ctx context.Context, p orkapi.VolumeRef) error
	WatchJobs(ctx context.Context, p orkapi.WatchJobsParams) (orkapi.JobsVersion, error)
	SetQuota(ctx context.Context, p orkapi.SetQuotaParams) (orkapi.Quota, error)
	DeleteQuota(ctx context.Context, p orkapi.QuotaRef) error
	ListQuotas(ctx context.Context, p orkapi.ListQuotasParams) (orkapi.ListQuotasReply, error)
}

var _ Ork = (*orkapi.Client)(nil)

// Observer sees every answered request: the route's operation ID (apiv1.Op*;
// "" when no route matched), the status and the time taken. It is the hook
// for metrics.
type Observer interface {
	ObserveRequest(op string, status int, elapsed time.Duration)
}

// Server is the app-node's HTTP API.
type Server struct {
	cfg     Config
	ork     Ork
	acc     Accounts
	log     *slog.Logger
	now     func() time.Time
	openapi []byte
	ui      http.Handler // the web interface, when this app-node serves it
	mux     *http.ServeMux
	obs     Observer
	shells  Shells
	// apiKeys keeps the inference API keys; modelHealth annotates
	// inference jobs (Deps).
	apiKeys     APIKeyStore
	modelHealth ModelHealthSource
	usage       store.Usage
	// datastores keeps the teams' datastores, their secrets sealed with
	// secrets (nil: their routes answer 501).
	datastores store.Datastores
	secrets    *seal.Key
	// logins limits sign-in attempts; jobCreates each team's job
	// creates (nil: no bound).
	logins     *loginLimiter
	jobCreates *limiterTable
	// proxies are the trusted gateways (clientAddr).
	proxies httpserve.Proxies
}

// handler serves one route. It returns the success body (nil: none) or an
// error, which toHTTP maps; the success status is the route's.
type handler func(w http.ResponseWriter, r *http.Request, c *caller) (any, error)

// Deps are what an app-node is built on. Ork, Accounts and Log are
// required; each of the others, left nil, turns its feature off as said.
type Deps struct {
	// Ork is wrk-ork (orkapi.Client over the fabric).
	Ork Ork
	// Accounts keeps users, teams, tokens, sessions and the audit log.
	Accounts Accounts
	Log      *slog.Logger
	// APIKeys keeps the inference API keys (nil: their routes answer 501).
	APIKeys APIKeyStore
	// Shells reaches the jobs' instance agents (nil: the shell, SSH and
	// port routes answer 503).
	Shells Shells
	// ModelHealth fills status.modelHealth of managed-inference jobs
	// (nil: jobs are answered as the ork has them).
	ModelHealth ModelHealthSource
	// WebUI serves every path outside the API (nil: those answer 404), for
	// an app-node behind a gateway that sends it the interface's paths too
	// (docs/gateway.md).
	WebUI http.Handler
	// Observer sees every answered request (metrics).
	Observer Observer
	// Fabric is the app-node's fabric node: proxy-inference looks the API
	// keys up there (keyapi.ByHash, answered from APIKeys; nil or no
	// APIKeys: not served), and delivers usage (usageapi.Record, into
	// Usage).
	Fabric fabric.Registrar
	// Usage keeps the inference usage (nil: GET /usage answers 501, and
	// no proxy can deliver any here).
	Usage store.Usage
	// Datastores keeps the teams' datastores (nil: their routes answer
	// 501). Their secret keys are sealed with the key in
	// Config.SecretsKeyFile, made there if there is none.
	Datastores store.Datastores
}

// New returns the app-node's server of cfg on d.
func New(cfg Config, d Deps) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("app-node config: %w", err)
	}
	if d.Ork == nil || d.Accounts == nil || d.Log == nil {
		return nil, errors.New("app-node: ork, accounts and logger are required")
	}
	ork, acc, log := d.Ork, d.Accounts, d.Log
	routes := apiv1.Routes()
	doc, err := apiv1.OpenAPI(routes, version.Version)
	if err != nil {
		return nil, fmt.Errorf("app-node: build OpenAPI document: %w", err)
	}
	s := &Server{cfg: cfg, ork: ork, acc: acc, log: log, now: time.Now, openapi: doc, mux: http.NewServeMux(), logins: newLoginLimiter(),
		ui: d.WebUI, obs: d.Observer, shells: d.Shells, apiKeys: d.APIKeys, modelHealth: d.ModelHealth, usage: d.Usage}
	if d.Datastores != nil {
		key, made, err := seal.LoadOrCreate(cfg.secretsKeyFile())
		if err != nil {
			return nil, fmt.Errorf("app-node: the secrets key: %w", err)
		}
		if made {
			log.Info("secrets key made: every app-node of this database needs this file", "file", cfg.secretsKeyFile())
		}
		s.datastores, s.secrets = d.Datastores, key
	}
	if n := cfg.JobCreatesPerMinute; n > 0 {
		s.jobCreates = newLimiterTable(time.Minute/time.Duration(n), n)
	}
	if l, ok := acc.(store.SignInLimits); ok {
		s.logins.shared = l
	}
	s.proxies, _ = httpserve.ParseProxies(cfg.TrustedProxies) // Validate checked them
	handlers := s.handlers()
	for _, rt := range routes {
		h, ok := handlers[rt.Op]
		if !ok {
			return nil, fmt.Errorf("app-node: no handler for route %s (%s)", rt.Op, rt.Pattern())
		}
		delete(handlers, rt.Op)
		s.mux.Handle(rt.Pattern(), s.serve(rt, h))
	}
	for op := range handlers {
		return nil, fmt.Errorf("app-node: handler %s has no route", op)
	}
	if d.Fabric != nil && d.APIKeys != nil {
		ServeKeyLookup(d.Fabric, d.APIKeys)
	}
	if d.Fabric != nil && d.Usage != nil {
		ServeUsage(d.Fabric, d.Usage)
	}
	if d.Fabric != nil && s.datastores != nil {
		ServePresign(d.Fabric, ork.GetJob, s.datastores, s.secrets)
	}
	return s, nil
}

// Bootstrap runs Bootstrap on the server's accounts and data directory.
func (s *Server) Bootstrap(ctx context.Context) (path string, created bool, err error) {
	return Bootstrap(ctx, s.acc, s.cfg.DataDir)
}

func (s *Server) handlers() map[string]handler {
	return map[string]handler{
		apiv1.OpCreateJob:               s.createJob,
		apiv1.OpListUsage:               s.listUsage,
		apiv1.OpListJobs:                s.listJobs,
		apiv1.OpGetJob:                  s.getJob,
		apiv1.OpDeleteJob:               s.deleteJob,
		apiv1.OpRestartJob:              s.restartJob,
		apiv1.OpKillJob:                 s.killJob,
		apiv1.OpDataSyncJob:             s.dataSyncJob,
		apiv1.OpGetDataSync:             s.getDataSync,
		apiv1.OpLabelJob:                s.labelJob,
		apiv1.OpJobCommand:              s.jobCommand,
		apiv1.OpInferenceAuth:           s.setInferenceAuth,
		apiv1.OpUpdateJob:               s.updateJob,
		apiv1.OpRestartReplica:          s.restartReplica,
		apiv1.OpDeleteReplica:           s.deleteReplica,
		apiv1.OpJobShell:                s.jobShell,
		apiv1.OpJobSSH:                  s.jobSSH,
		apiv1.OpJobTerminal:             s.jobTerminal,
		apiv1.OpJobHTTPGet:              s.jobHTTP,
		apiv1.OpJobHTTPHead:             s.jobHTTP,
		apiv1.OpJobHTTPPost:             s.jobHTTP,
		apiv1.OpJobHTTPPut:              s.jobHTTP,
		apiv1.OpJobHTTPPatch:            s.jobHTTP,
		apiv1.OpJobHTTPDelete:           s.jobHTTP,
		apiv1.OpJobHTTPOptions:          s.jobHTTP,
		apiv1.OpGetFleet:                s.getFleet,
		apiv1.OpListRacks:               s.listRacks,
		apiv1.OpListVolumes:             s.listVolumes,
		apiv1.OpDeleteVolume:            s.deleteVolume,
		apiv1.OpRegisterRack:            s.registerRack,
		apiv1.OpRemoveRack:              s.removeRack,
		apiv1.OpCreateAPIKey:            s.createAPIKey,
		apiv1.OpListAPIKeys:             s.listAPIKeys,
		apiv1.OpRevokeAPIKey:            s.revokeAPIKey,
		apiv1.OpRotateAPIKey:            s.rotateAPIKey,
		apiv1.OpCreateDatastore:         s.createDatastore,
		apiv1.OpListDatastores:          s.listDatastores,
		apiv1.OpGetDatastore:            s.getDatastore,
		apiv1.OpSetDatastoreCredentials: s.setDatastoreCredentials,
		apiv1.OpDeleteDatastore:         s.deleteDatastore,
		apiv1.OpWhoAmI:                  s.whoAmI,
		apiv1.OpLogin:                   s.login,
		apiv1.OpCreateSession:           s.createSession,
		apiv1.OpDeleteSession:           s.deleteSession,
		apiv1.OpChangePassword:          s.changePassword,
		apiv1.OpListTokens:              s.listTokens,
		apiv1.OpCreateToken:             s.createToken,
		apiv1.OpRevokeToken:             s.revokeToken,
		apiv1.OpListUsers:               s.listUsers,
		apiv1.OpCreateUser:              s.createUser,
		apiv1.OpGetUser:                 s.getUser,
		apiv1.OpUpdateUser:              s.updateUser,
		apiv1.OpDeleteUser:              s.deleteUser,
		apiv1.OpSetPassword:             s.setUserPassword,
		apiv1.OpListTeams:               s.listTeams,
		apiv1.OpCreateTeam:              s.createTeam,
		apiv1.OpDeleteTeam:              s.deleteTeam,
		apiv1.OpListMembers:             s.listMembers,
		apiv1.OpPutMember:               s.putMember,
		apiv1.OpDeleteMember:            s.deleteMember,
		apiv1.OpListAudit:               s.listAudit,
		apiv1.OpListQuotas:              s.listQuotas,
		apiv1.OpListTeamQuotas:          s.listTeamQuotas,
		apiv1.OpSetQuota:                s.setQuota,
		apiv1.OpDeleteQuota:             s.deleteQuota,
		apiv1.OpOpenAPI:                 s.openAPI,
		apiv1.OpHealth:                  s.health,
	}
}

// info is what the logging middleware learns from the route handler.
type info struct {
	op   string
	user string
	// target names what a public route acted on (the user a sign-in
	// tried), for the audit log.
	target string
}

type infoKey struct{}

// serve wraps h with what every route shares: authentication and access,
// refusing unknown query parameters (but on public routes), and writing
// the answer. Proxy routes authenticate in their handler and keep the
// query for the job.
func (s *Server) serve(rt apiv1.Route, h handler) http.Handler {
	known := map[string]bool{}
	for _, p := range rt.Params {
		if p.In == apiv1.InQuery {
			known[p.Name] = true
		}
	}
	public := rt.Perm == authz.Public
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, _ := r.Context().Value(infoKey{}).(*info)
		if in != nil {
			in.op = rt.Op
		}
		var c *caller
		if !public && !rt.Proxy {
			var err error
			if c, err = s.authenticate(r); err == nil {
				if in != nil {
					in.user = c.user.Name
				}
				err = s.authorize(r, rt, c)
			}
			if err != nil {
				s.writeError(w, r, err)
				s.auditRequest(r, rt, c, w, err)
				return
			}
		}
		for k := range r.URL.Query() {
			if !known[k] && k != apiv1.QueryTeam && !public && !rt.Proxy {
				err := badRequest("unknown query parameter %s", clip(k))
				s.writeError(w, r, err)
				s.auditRequest(r, rt, c, w, err)
				return
			}
		}
		body, err := h(w, r, c)
		switch {
		case err != nil:
			s.writeError(w, r, err)
		case body == written{}:
			// The handler answered (an upgraded connection).
		case body == nil:
			w.WriteHeader(rt.Status)
		case rt.Op == apiv1.OpOpenAPI:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(rt.Status)
			_, _ = w.Write(body.([]byte))
		default:
			writeJSON(w, rt.Status, withActions(c, body))
		}
		s.auditRequest(r, rt, c, w, err)
	})
}

// Handler returns the API's handler: every route of apiv1.Routes, JSON
// errors for unknown paths (404) and methods (405), and request logging.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		in := &info{}
		r = r.WithContext(context.WithValue(r.Context(), infoKey{}, in))
		sw := &statusWriter{ResponseWriter: w}
		s.route(sw, r)
		elapsed := time.Since(start)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		level := slog.LevelInfo
		if sw.status >= 500 {
			level = slog.LevelWarn
		}
		s.log.Log(r.Context(), level, "http request", "method", r.Method, "path", r.URL.Path,
			"op", in.op, "status", sw.status, "duration_ms", float64(elapsed.Microseconds())/1000,
			"user", in.user, "remote", s.clientAddr(r))
		if s.obs != nil {
			s.obs.ObserveRequest(in.op, sw.status, elapsed)
		}
	})
}

// route dispatches r, answering requests no route matches with a JSON
// error instead of the mux's plain text.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	if _, pattern := s.mux.Handler(r); pattern != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	if s.ui != nil && !strings.HasPrefix(r.URL.Path, apiv1.Prefix+"/") && r.URL.Path != apiv1.Prefix {
		s.ui.ServeHTTP(w, r) // the web interface: every path outside the API
		return
	}
	h, _ := s.mux.Handler(r)
	rec := &headerRecorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	switch rec.status {
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", rec.header.Get("Allow"))
		s.writeError(w, r, errorf(http.StatusMethodNotAllowed, apiv1.CodeMethodNotAllowed, "method %s is not allowed on %s", r.Method, r.URL.Path))
	case http.StatusNotFound:
		s.writeError(w, r, errorf(http.StatusNotFound, apiv1.CodeNotFound, "no route %s %s; see %s/openapi.json", r.Method, r.URL.Path, apiv1.Prefix))
	default: // a redirect to the clean path
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
	}
}

// headerRecorder keeps the status and headers the mux's fallback handlers
// write, and drops their plain-text body.
type headerRecorder struct {
	header http.Header
	status int
}

func (h *headerRecorder) Header() http.Header { return h.header }
func (h *headerRecorder) Write(b []byte) (int, error) {
	if h.status == 0 {
		h.status = http.StatusOK
	}
	return len(b), nil
}
func (h *headerRecorder) WriteHeader(status int) {
	if h.status == 0 {
		h.status = status
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Run runs the app-node until ctx ends and returns once all it started
// has stopped: the audit log's retention and, when ln is not nil, the API
// served on ln (Serve). With ln nil the caller serves Handler() itself
// (the one-listener platform of the tests).
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.RunAuditRetention(gctx) })
	if ln != nil {
		g.Go(func() error { return s.Serve(gctx, ln) })
	}
	return g.Wait()
}

// Serve serves the API on ln until ctx ends, its clients bounded by
// cfg.HTTP; it closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := httpserve.New(s.Handler(), s.cfg.HTTP, s.log)
	hs.BaseContext = func(net.Listener) context.Context { return context.WithoutCancel(ctx) }
	s.log.Info("app-node listening", "addr", ln.Addr().String())
	if err := httpserve.Run(ctx, hs, ln, s.cfg.ShutdownGrace.D()); err != nil {
		return fmt.Errorf("app-node: %w", err)
	}
	return nil
}
