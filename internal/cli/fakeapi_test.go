package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// fakeAPI is a small in-memory stand-in for the app-node's /api/v1: enough
// of its behaviour (auth, validation errors, filters, paging) to drive the
// CLI. A job created while script is set plays those statuses, one per GET.
type fakeAPI struct {
	t     *testing.T
	srv   *httptest.Server
	token string

	mu     sync.Mutex
	jobs   []cosmic.Job // oldest first
	racks  []apiv1.Rack
	script []cosmic.Status
	played map[string]int
	reqs   []string // "METHOD PATH?QUERY"
}

const fakeToken = "good-token"

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{t: t, token: fakeToken, played: map[string]int{}}
	mux := http.NewServeMux()
	p := apiv1.Prefix
	mux.HandleFunc("GET "+p+"/whoami", func(w http.ResponseWriter, r *http.Request) {
		reply(w, 200, apiv1.WhoAmI{User: "admin", Team: "default", Role: cosmic.RoleAdmin, Token: "t1"})
	})
	mux.HandleFunc("POST "+p+"/jobs", f.create)
	mux.HandleFunc("GET "+p+"/jobs", f.list)
	mux.HandleFunc("POST "+p+"/jobs/command", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s, err := cosmic.ParseSpec(body)
		if err != nil {
			fail(w, 400, apiv1.CodeBadRequest, err.Error(), nil)
			return
		}
		reply(w, 200, cosmic.CLICommand(s))
	})
	mux.HandleFunc("GET "+p+"/jobs/{id}", f.withJob(func(j *cosmic.Job, r *http.Request) (int, any) {
		if i, ok := f.played[j.ID]; ok && i < len(f.script) {
			j.Status = f.script[i]
			f.played[j.ID] = i + 1
		}
		return 200, *j
	}))
	mux.HandleFunc("DELETE "+p+"/jobs/{id}", f.withJob(func(j *cosmic.Job, r *http.Request) (int, any) {
		if j.Status.State == cosmic.StateRunning && r.URL.Query().Get("force") != "true" {
			return 409, apiv1.ErrorBody{Code: apiv1.CodeConflict, Message: "the job is running: kill it first or use force"}
		}
		out := *j
		f.jobs = slices.DeleteFunc(f.jobs, func(x cosmic.Job) bool { return x.ID == out.ID })
		return 200, out
	}))
	mux.HandleFunc("POST "+p+"/jobs/{id}/restart", f.withJob(func(j *cosmic.Job, r *http.Request) (int, any) {
		j.Status.State = cosmic.StateRestarting
		return 200, *j
	}))
	mux.HandleFunc("POST "+p+"/jobs/{id}/kill", f.withJob(func(j *cosmic.Job, r *http.Request) (int, any) {
		j.Status.State = cosmic.StateStopped
		return 200, *j
	}))
	mux.HandleFunc("PUT "+p+"/jobs/{id}/label", f.withJob(func(j *cosmic.Job, r *http.Request) (int, any) {
		var l apiv1.Label
		json.NewDecoder(r.Body).Decode(&l)
		if j.Spec.Labels == nil {
			j.Spec.Labels = map[string]string{}
		}
		if l.Value == "" {
			delete(j.Spec.Labels, l.Name)
		} else {
			j.Spec.Labels[l.Name] = l.Value
		}
		return 200, *j
	}))
	mux.HandleFunc("POST "+p+"/jobs/{id}/replicas/{n}/restart", f.withJob(func(j *cosmic.Job, r *http.Request) (int, any) {
		return 200, *j
	}))
	mux.HandleFunc("DELETE "+p+"/jobs/{id}/replicas/{n}", f.withJob(func(j *cosmic.Job, r *http.Request) (int, any) {
		return 200, *j
	}))
	mux.HandleFunc("GET "+p+"/racks", func(w http.ResponseWriter, r *http.Request) {
		reply(w, 200, apiv1.RackList{Items: f.racks, Total: len(f.racks)})
	})
	mux.HandleFunc("POST "+p+"/racks", func(w http.ResponseWriter, r *http.Request) {
		var in apiv1.RegisterRack
		json.NewDecoder(r.Body).Decode(&in)
		rk := apiv1.Rack{ID: in.ID, Type: cosmic.RackTypeServer, Location: in.Location, GPUModel: in.GPUModel, WorkerKey: in.WorkerKey, WorkerAddrs: in.WorkerAddrs}
		f.racks = append(f.racks, rk)
		reply(w, 201, rk)
	})
	mux.HandleFunc("DELETE "+p+"/racks/{id}", func(w http.ResponseWriter, r *http.Request) {
		n := len(f.racks)
		f.racks = slices.DeleteFunc(f.racks, func(x apiv1.Rack) bool { return x.ID == r.PathValue("id") })
		if len(f.racks) == n {
			fail(w, 404, apiv1.CodeNotFound, "no rack "+r.PathValue("id"), nil)
			return
		}
		w.WriteHeader(204)
	})
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.reqs = append(f.reqs, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		if r.Header.Get("Authorization") != "Bearer "+f.token {
			fail(w, 401, apiv1.CodeUnauthorized, "missing or unknown token", nil)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// env is the environment that points the CLI at the fake, logged in.
func (f *fakeAPI) env() map[string]string {
	return map[string]string{envURL: f.srv.URL, envToken: f.token}
}

func (f *fakeAPI) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs)
}

// addJob stores a job as if created at created.
func (f *fakeAPI) addJob(id, name string, state cosmic.State, labels map[string]string, created time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: name, Location: "us", Image: "ubuntu", Labels: labels}
	s.Default()
	j := cosmic.NewJob(id, "alice", "default", s, created)
	j.Status.State = state
	f.jobs = append(f.jobs, j)
}

func (f *fakeAPI) create(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s, err := cosmic.ParseSpec(body)
	if err != nil {
		fail(w, 400, apiv1.CodeBadRequest, err.Error(), nil)
		return
	}
	s.Default()
	if err := s.Validate(); err != nil {
		fail(w, 400, apiv1.CodeInvalid, "the job spec is invalid", cosmic.FieldErrors(err))
		return
	}
	if s.Location != "us" {
		fail(w, 400, apiv1.CodeInvalid, "the job spec is invalid", []*cosmic.FieldError{{Field: "location", Message: `no rack in location "` + s.Location + `"`}})
		return
	}
	j := cosmic.NewJob(cosmic.NewJobID(), "admin", "default", s, time.Now())
	j.Status.State = cosmic.StateQueued
	if f.script != nil {
		f.played[j.ID] = 0
	}
	f.jobs = append(f.jobs, j)
	reply(w, 201, j)
}

func (f *fakeAPI) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var match []cosmic.Job
	for i := len(f.jobs) - 1; i >= 0; i-- {
		j := f.jobs[i]
		if st := q["statusState"]; len(st) > 0 && !slices.Contains(st, string(j.Status.State)) {
			continue
		}
		if u := q.Get("userName"); u != "" && j.User != u {
			continue
		}
		ok := true
		if sel := q.Get("labelSelector"); sel != "" {
			for kv := range strings.SplitSeq(sel, ",") {
				k, v, _ := strings.Cut(kv, "=")
				ok = ok && j.Spec.Labels[k] == v
			}
		}
		if ok {
			match = append(match, j)
		}
	}
	page, size := 1, 50
	if v, err := strconv.Atoi(q.Get("page")); err == nil {
		page = v
	}
	if v, err := strconv.Atoi(q.Get("size")); err == nil {
		size = v
	}
	lo, hi := min((page-1)*size, len(match)), min(page*size, len(match))
	reply(w, 200, apiv1.JobList{Items: match[lo:hi], Total: len(match), Page: page, Size: size})
}

// withJob finds the job of the path (404 otherwise) and lets h change it
// under the lock; an ErrorBody answer is sent as an error.
func (f *fakeAPI) withJob(h func(*cosmic.Job, *http.Request) (int, any)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := range f.jobs {
			if f.jobs[i].ID == r.PathValue("id") {
				code, v := h(&f.jobs[i], r)
				if eb, ok := v.(apiv1.ErrorBody); ok {
					fail(w, code, eb.Code, eb.Message, nil)
					return
				}
				reply(w, code, v)
				return
			}
		}
		fail(w, 404, apiv1.CodeNotFound, "no job "+r.PathValue("id"), nil)
	}
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code int, c, msg string, fields []*cosmic.FieldError) {
	var details json.RawMessage
	if fields != nil {
		details, _ = json.Marshal(fields)
	}
	reply(w, code, apiv1.ErrorResponse{Error: apiv1.ErrorBody{Code: c, Message: msg, Details: details}})
}
