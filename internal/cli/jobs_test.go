package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/cosmictest"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/simcluster/simapi"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// runCLIIn is runCLI with stdin.
func runCLIIn(t *testing.T, env map[string]string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	a := &App{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := a.Run(ctx, args)
	return code, out.String(), errb.String()
}

// onPlatform starts the whole platform, as `cosmicac up` runs it, on a
// temporary data directory, and returns it with the environment that
// points the CLI at it as its admin (and at an empty home: no login
// config of the user's).
func onPlatform(t *testing.T, opts ...cosmictest.Option) (*cosmictest.Env, map[string]string) {
	t.Helper()
	e := cosmictest.NewEnv(t, opts...)
	tok, err := e.P.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	return e, map[string]string{envURL: e.P.URL, envToken: tok, "HOME": t.TempDir()}
}

// simStep slows the simulated rack's steps, so that a poller sees each
// state a job goes through.
func simStep(d time.Duration) cosmictest.Option {
	return func(c *platform.Config) { c.Sim.Step = config.Duration(d) }
}

// apiRecorder is a reverse proxy in front of the platform's API that
// records each request the CLI sends through it, as "METHOD PATH?QUERY".
type apiRecorder struct {
	URL string

	mu   sync.Mutex
	reqs []string
}

func recordAPI(t *testing.T, target string) *apiRecorder {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rec := &apiRecorder{}
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		rec.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	rec.URL = srv.URL
	return rec
}

func (r *apiRecorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

// createdID is the job ID of `jobs create --wait`'s "job ID created" line.
func createdID(t *testing.T, stderr string) string {
	t.Helper()
	first, _, _ := strings.Cut(stderr, "\n")
	id, ok := strings.CutSuffix(strings.TrimPrefix(first, "job "), " created")
	if _, err := cosmic.ParseJobID(id); !ok || err != nil {
		t.Fatalf("no \"job ID created\" line: %q", stderr)
	}
	return id
}

func TestJobsCreate(t *testing.T) {
	e, env := onPlatform(t)
	code, out, errs := runCLI(t, env, "jobs", "create", "--location", "us", "--image", "ubuntu:24.04", "--gpus", "2",
		"--name", "train", "--tags", "team=ml", "--env", "A=1", "-o", "json", "--", "python", "train.py")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var j cosmic.Job
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("-o json printed %q: %v", out, err)
	}
	want := cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: "train", Labels: map[string]string{"team": "ml"}, Location: "us",
		Image: "ubuntu:24.04", Command: []string{"python", "train.py"}, EnvVars: []cosmic.EnvVar{{Name: "A", Value: "1"}},
		Resources: cosmic.Resources{GPU: 2}}
	want.Default()
	if d := cmp.Diff(want, j.Spec); d != "" {
		t.Errorf("created spec (-want +got):\n%s", d)
	}
	if stored, err := e.Client.GetJob(e.Ctx, j.ID); err != nil || !cmp.Equal(stored.Spec, j.Spec) {
		t.Errorf("the platform holds %+v (%v), the CLI printed %+v", stored.Spec, err, j.Spec)
	}

	// The table (default) and -q.
	code, out, _ = runCLI(t, env, "jobs", "create", "--location", "us", "--image", "ubuntu")
	if code != 0 || !strings.HasPrefix(out, "ID ") || !strings.Contains(out, "gpu-container") {
		t.Errorf("table: exit %d, %q", code, out)
	}
	code, out, _ = runCLI(t, env, "jobs", "create", "--location", "us", "--image", "ubuntu", "-q")
	if _, err := cosmic.ParseJobID(strings.TrimSpace(out)); code != 0 || err != nil {
		t.Errorf("-q: exit %d, %q", code, out)
	}

	// -f - (stdin) with a flag overriding it; -o yaml.
	code, out, errs = runCLIIn(t, env, "type: gpu-container\nregion: us\nimage: ubuntu\nresources: {gpu: 1}\n", "jobs", "create", "-f", "-", "--gpus", "4", "-o", "yaml")
	if code != 0 {
		t.Fatalf("-f -: exit %d: %s", code, errs)
	}
	j = cosmic.Job{}
	if err := yaml.Unmarshal([]byte(out), &j); err != nil || j.Spec.Resources.GPU != 4 || j.Spec.Location != "us" {
		t.Errorf("-o yaml printed %q (%v)", out, err)
	}
}

// TestJobsCreateInvalid: local validation reports every problem with exit 2
// and calls no API; the API's 4xx errors give code, message and fields with
// exit 1.
func TestJobsCreateInvalid(t *testing.T) {
	e, env := onPlatform(t)
	rec := recordAPI(t, e.P.URL)
	env[envURL] = rec.URL
	code, _, errs := runCLI(t, env, "jobs", "create", "--gpus", "2000", "--env", "COSMICAC_X=1", "--http-port", "70000")
	if code != ExitUsage {
		t.Fatalf("exit %d, want %d: %s", code, ExitUsage, errs)
	}
	for _, field := range []string{"location", "image", "resources.gpu", "envVars[0].name", "defaultHttpPort"} {
		if !strings.Contains(errs, "\n  "+field+": ") {
			t.Errorf("stderr does not name %s:\n%s", field, errs)
		}
	}
	for name, args := range map[string][]string{
		"bad flag value": {"jobs", "create", "--gpus", "many"},
		"no GPUs":        {"jobs", "create", "--location", "us", "--image", "x", "--gpus", "0"},
		"no replicas":    {"jobs", "create", "--location", "us", "--model", "org/m", "--replicas", "0"},
		"unknown flag":   {"jobs", "create", "--gpu", "1"},
		"bad -o":         {"jobs", "create", "--location", "us", "--image", "x", "-o", "xml"},
		"missing file":   {"jobs", "create", "-f", "/nonexistent.yaml"},
	} {
		if code, _, errs := runCLI(t, env, args...); code != ExitUsage {
			t.Errorf("%s: exit %d, want %d: %s", name, code, ExitUsage, errs)
		}
	}
	if r := rec.requests(); len(r) != 0 {
		t.Errorf("local validation failures called the API: %v", r)
	}
	code, _, errs = runCLI(t, env, "jobs", "create", "--location", "eu", "--image", "ubuntu")
	if code != ExitFailure || !strings.Contains(errs, "error: invalid: ") || !strings.Contains(errs, "location: no rack") {
		t.Errorf("API 400: exit %d, stderr %q", code, errs)
	}
	if r := rec.requests(); len(r) != 1 || !strings.HasPrefix(r[0], "POST "+apiv1.Prefix+"/jobs?") {
		t.Errorf("the API's refusal: requests %v, want the one create", r)
	}
	if l, err := e.Client.ListJobs(e.Ctx, client.ListOptions{}); err != nil || l.Total != 0 {
		t.Errorf("the platform holds %d jobs (%v), want none", l.Total, err)
	}
}

func TestJobsCreateDryRun(t *testing.T) {
	code, out, errs := runCLI(t, nil, "jobs", "create", "--model", "org/model", "--location", "us", "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	want := "cosmicac jobs create --type managed-inference --location us --disk 200 --cpu 8 --memory 64 --runtime vllm --model org/model --replicas 1 --gpus-per-replica 1\n"
	if out != want {
		t.Errorf("dry run printed\n%s\nwant\n%s", out, want)
	}
}

// TestJobsCreateWait follows jobs on a one-node rack with slow steps, so
// that --wait sees each state: one whose import fails, and one that queues
// until the job filling the rack is killed, then runs.
func TestJobsCreateWait(t *testing.T) {
	e, env := onPlatform(t, cosmictest.Sim(1, 8), simStep(200*time.Millisecond))
	args := func(name string, gpus int) []string {
		return []string{"jobs", "create", "--name", name, "--location", "us", "--image", "ubuntu", "--gpus", strconv.Itoa(gpus),
			"--wait", "--poll-interval", "5ms"}
	}

	e.Fault(simapi.MethodFailImport, simapi.ReplicaParams{})
	code, _, errs := runCLI(t, env, args("broken", 1)...)
	if code != ExitJobFailed {
		t.Fatalf("failed job: exit %d, want %d: %s", code, ExitJobFailed, errs)
	}
	failed, err := e.Client.GetJob(e.Ctx, createdID(t, errs))
	reason := failed.Status.Reason
	if err != nil || reason == nil || reason.Code != cosmic.ReasonImportFailed || reason.Fix == "" {
		t.Fatalf("the failed job: %+v, %v", failed.Status, err)
	}
	for _, s := range []string{"] starting: import root disk", "] failed: import_failed\n", "import_failed: " + reason.Message, "fix: " + reason.Fix} {
		if !strings.Contains(errs, s) {
			t.Errorf("stderr lacks %q:\n%s", s, errs)
		}
	}

	blocker := e.Create(cosmictest.Container("blocker", 8))
	e.WaitState(blocker.ID, cosmic.StateRunning)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb lockedBuffer
	done := startCLI(ctx, env, &out, &errb, args("train", 8)...)
	queued := "queued (position 1: waiting for 8 × GPU in us)"
	waittest.Until(t, func() bool { return strings.Contains(errb.String(), "] "+queued+"\n") }, "--wait to show the job queued: %s", &errb)
	if _, err := e.Client.KillJob(e.Ctx, blocker.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
	case <-time.After(waittest.Timeout):
		t.Fatalf("--wait did not end once the job could run: %s", errb.String())
	}
	lines := waitLines(errb.String())
	if !strings.HasPrefix(lines[0], "job ") || lines[len(lines)-1] != "running" {
		t.Errorf("stderr does not go from the create to running:\n%s", errb.String())
	}
	// In order, each a change: queued with its place, pending, starting
	// with the import's progress, running.
	want := []func(string) bool{
		func(l string) bool { return l == queued },
		func(l string) bool { return l == "pending" },
		func(l string) bool {
			return strings.HasPrefix(l, "starting: import root disk ") && strings.HasSuffix(l, "%")
		},
		func(l string) bool { return l == "running" },
	}
	next := 0
	for i, l := range lines[1:] {
		if next < len(want) && want[next](l) {
			next++
		}
		if i > 0 && l == lines[i] {
			t.Errorf("%q twice in a row", l)
		}
	}
	if next != len(want) {
		t.Errorf("stderr lacks step %d of queued (position 1 …), pending, starting: import root disk N%%, running:\n%s", next, errb.String())
	}
	if !strings.Contains(out.String(), "running") {
		t.Errorf("stdout %q", out.String())
	}
}

// listAt runs `jobs list` with the AGE column's clock at now and returns
// its lines.
func listAt(t *testing.T, env map[string]string, now time.Time) []string {
	t.Helper()
	defer func(orig func() time.Time) { timeNow = orig }(timeNow)
	timeNow = func() time.Time { return now }
	code, out, errs := runCLI(t, env, "jobs", "list")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	return strings.Split(strings.TrimSpace(out), "\n")
}

// TestJobsList lists alice's jobs on a one-node rack: one failed (its
// import), one running that fills the rack, and one queued behind it.
func TestJobsList(t *testing.T) {
	e, env := onPlatform(t, cosmictest.Sim(1, 8))
	alice := client.New(e.P.URL, e.AddUser("alice", "default", cosmic.RoleMember))
	create := func(name string, gpus int, labels map[string]string) cosmic.Job {
		s := cosmictest.Container(name, gpus)
		s.Image, s.Labels = "ubuntu", labels
		j, err := alice.CreateJob(e.Ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	e.Fault(simapi.MethodFailImport, simapi.ReplicaParams{})
	c := e.WaitState(create("c", 1, map[string]string{"team": "ml"}).ID, cosmic.StateFailed)
	e.WaitState(create("a", 8, map[string]string{"team": "ml"}).ID, cosmic.StateRunning)
	b := create("", 1, nil)
	waittest.NoError(t, func() error {
		var err error
		if b, err = e.Client.GetJob(e.Ctx, b.ID); err == nil && (b.Status.State != cosmic.StateQueued || b.Status.WaitingFor == "") {
			err = fmt.Errorf("%+v", b.Status)
		}
		return err
	}, "the last job to wait for the rack")

	// Newest first; the ages as they are 3 days after c's create and 90s
	// after b's.
	lines := listAt(t, env, c.CreatedAt.Add(72*time.Hour+time.Minute))
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "ID NAME TYPE STATE REASON GPUS LOCATION AGE USER" {
		t.Fatalf("table:\n%s", strings.Join(lines, "\n"))
	}
	if got := strings.Fields(lines[3]); !slices.Equal(got, []string{c.ID, "c", "gpu-container", "failed", "import_failed", "1", "us", "3d", "alice"}) {
		t.Errorf("row %q", got)
	}
	lines = listAt(t, env, b.CreatedAt.Add(90*time.Second+time.Second/2))
	want := strings.Fields(b.ID + " - gpu-container queued #1 waiting for " + b.Status.WaitingFor + " 1 us 90s alice")
	if got := strings.Fields(lines[1]); !slices.Equal(got, want) {
		t.Errorf("row %q, want %q", got, want)
	}

	rec := recordAPI(t, e.P.URL)
	viaRec := maps.Clone(env)
	viaRec[envURL] = rec.URL
	code, out, _ := runCLI(t, viaRec, "jobs", "list", "--state", "running,failed", "--label", "team=ml", "--user", "alice",
		"--sort", "name", "--order", "asc", "--size", "1", "--page", "1", "-o", "json")
	var l apiv1.JobList
	if err := json.Unmarshal([]byte(out), &l); code != 0 || err != nil || l.Total != 2 || len(l.Items) != 1 || l.Items[0].Spec.Name != "a" {
		t.Fatalf("-o json: exit %d, %q (%v)", code, out, err)
	}
	reqs := rec.requests()
	last := reqs[len(reqs)-1]
	for _, q := range []string{"statusState=running", "statusState=failed", "labelSelector=team%3Dml", "userName=alice", "sort=name", "order=asc", "size=1", "page=1"} {
		if !strings.Contains(last, q) {
			t.Errorf("query %q lacks %s", last, q)
		}
	}

	code, out, _ = runCLI(t, env, "jobs", "list", "--all", "-o", "yaml")
	if err := yaml.Unmarshal([]byte(out), &l); code != 0 || err != nil || len(l.Items) != 3 {
		t.Errorf("--all -o yaml: exit %d, %q (%v)", code, out, err)
	}
	code, _, errs := runCLI(t, env, "jobs", "list", "--size", "2")
	if code != 0 || !strings.Contains(errs, "showing 2 of 3 jobs") {
		t.Errorf("paged table: exit %d, stderr %q", code, errs)
	}
	if code, _, _ := runCLI(t, env, "jobs", "list", "--state", "sleeping"); code != ExitUsage {
		t.Errorf("bad state: exit %d", code)
	}
}

// uniquePrefix is the shortest prefix of id, of 4 characters or more, that
// no other of ids starts with.
func uniquePrefix(id string, ids []string) string {
	for n := 4; n < len(id); n++ {
		if !slices.ContainsFunc(ids, func(o string) bool { return o != id && strings.HasPrefix(o, id[:n]) }) {
			return id[:n]
		}
	}
	return id
}

// unusedPrefix is a 4-hex-digit prefix none of ids starts with.
func unusedPrefix(ids []string) string {
	for i := 0xffff; ; i-- {
		p := fmt.Sprintf("%04x", i)
		if !slices.ContainsFunc(ids, func(id string) bool { return strings.HasPrefix(id, p) }) {
			return p
		}
	}
}

// TestJobActions: a running gpu-container job, and managed-inference jobs
// (2 replicas × 8 GPUs) queued behind it, as many as it takes for two
// job IDs to share their first digit.
func TestJobActions(t *testing.T) {
	e, env := onPlatform(t)
	train := e.Create(cosmictest.Container("train", 1))
	e.WaitState(train.ID, cosmic.StateRunning)
	id := train.ID
	ids := []string{id}
	var serve []string
	ambiguous := ""
	for ambiguous == "" {
		j := e.Create(cosmictest.VLLM(fmt.Sprintf("serve-%d", len(serve)), 2, 8))
		serve = append(serve, j.ID)
		for _, o := range ids {
			if o[0] == j.ID[0] {
				ambiguous = j.ID[:1]
			}
		}
		ids = append(ids, j.ID)
	}

	code, out, errs := runCLI(t, env, "jobs", "get", uniquePrefix(id, ids))
	if code != 0 || !strings.Contains(out, "ID:") || !strings.Contains(out, id) || !strings.Contains(out, "State:") {
		t.Errorf("get by prefix: exit %d, %q %s", code, out, errs)
	}
	// One character, even of two IDs, is too short a prefix to name a job
	// (TestMatchJob has the rules).
	if code, _, errs := runCLI(t, env, "jobs", "delete", ambiguous, "--force"); code != ExitUsage || !strings.Contains(errs, "too few for an ID prefix") {
		t.Errorf("one-character prefix: exit %d, %s", code, errs)
	}
	unused := unusedPrefix(ids)
	if code, _, errs := runCLI(t, env, "jobs", "get", unused); code != ExitFailure || !strings.Contains(errs, `no job is named "`+unused+`" or has an ID starting with it`) {
		t.Errorf("unknown prefix: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI(t, env, "jobs", "get", "not-a-uuid!"); code != ExitFailure || !strings.Contains(errs, `no job is named "not-a-uuid!"`) {
		t.Errorf("unknown name: exit %d, %s", code, errs)
	}
	if code, out, errs := runCLI(t, env, "jobs", "get", "train"); code != 0 || !strings.Contains(out, id) {
		t.Errorf("get by name: exit %d, %q %s", code, out, errs)
	}
	if code, _, errs := runCLI(t, env, "jobs", "get", cosmic.NewJobID()); code != ExitFailure || !strings.Contains(errs, "not_found: ") {
		t.Errorf("unknown ID: exit %d, %s", code, errs)
	}
	code, out, _ = runCLI(t, env, "jobs", "get", id, "-o", "json")
	var j cosmic.Job
	if err := json.Unmarshal([]byte(out), &j); code != 0 || err != nil || j.ID != id {
		t.Errorf("get -o json: exit %d, %q", code, out)
	}

	// Replica actions are a managed-inference job's, on queued replicas.
	for _, c := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"label", id, "team=ml"}, 0, "label team=ml"},
		{[]string{"label", id, "bad key=x"}, ExitUsage, ""},
		{[]string{"label", id, "team-"}, 0, "label team removed"},
		{[]string{"restart", id}, 0, "restarting job " + id + " (restarting)"},
		{[]string{"restart", serve[0], "--replica", "0"}, 0, "restarting replica 0"},
		{[]string{"delete", serve[0], "--replica", "1"}, 0, "deleted replica 1"},
	} {
		code, out, errs := runCLI(t, env, append([]string{"jobs"}, c.args...)...)
		if code != c.code || !strings.Contains(out, c.out) {
			t.Errorf("%v: exit %d, %q %s", c.args, code, out, errs)
		}
	}
	if got, err := e.Client.GetJob(e.Ctx, id); err != nil || got.Spec.Labels["team"] != "" {
		t.Errorf("the label is still set: %v %v", got.Spec.Labels, err)
	}
	// The queued jobs go, so that the killed job's GPU is its own again.
	for _, s := range serve {
		if _, err := e.Client.DeleteJob(e.Ctx, s, false); err != nil {
			t.Fatal(err)
		}
		e.WaitGone(s)
	}
	if code, out, errs := runCLI(t, env, "jobs", "kill", id); code != 0 || !strings.Contains(out, "killed job "+id+" (stopped)") {
		t.Errorf("kill: exit %d, %q %s", code, out, errs)
	}

	if code, out, errs := runCLI(t, env, "jobs", "restart", id); code != 0 || !strings.Contains(out, "restarting job "+id+" (queued)") {
		t.Errorf("restart a stopped job: exit %d, %q %s", code, out, errs)
	}
	e.WaitState(id, cosmic.StateRunning)
	if code, _, errs := runCLI(t, env, "jobs", "delete", id); code != ExitFailure || !strings.Contains(errs, "conflict: job "+id+" is running") {
		t.Errorf("delete running: exit %d, %s", code, errs)
	}
	if code, out, errs := runCLI(t, env, "jobs", "delete", id, "--force"); code != 0 || !strings.Contains(out, "job "+id+" is being deleted") {
		t.Errorf("delete --force: exit %d, %q %s", code, out, errs)
	}
	e.WaitGone(id)
}

func TestJobsCommand(t *testing.T) {
	_, env := onPlatform(t)
	code, out, errs := runCLIIn(t, env, `{"type":"gpu-container","location":"us","image":"ubuntu","partnerId":"p"}`, "jobs", "command", "-f", "-", "--name", "x y")
	if code != 0 || out != "cosmicac jobs create --type gpu-container --name 'x y' --location us --image ubuntu\n" {
		t.Errorf("exit %d, %q, %s", code, out, errs)
	}
	if !strings.Contains(errs, "partnerId") || !strings.Contains(errs, cosmic.FileCommand) {
		t.Errorf("no note about unexpressed fields: %q", errs)
	}
}

// TestRacks registers a rack whose worker never answers next to the
// platform's simulated one, half of whose GPUs a job holds.
func TestRacks(t *testing.T) {
	e, env := onPlatform(t)
	e.WaitState(e.Create(cosmictest.Container("half", 8)).ID, cosmic.StateRunning)
	key := strings.Repeat("ab", 32)
	code, out, errs := runCLI(t, env, "racks", "register", "--id", "r1", "--location", "us", "--gpu-model", "GH100_H100_SXM5_80GB",
		"--worker-key", key, "--worker-addr", strings.TrimPrefix(closedURL(t), "http://"))
	if code != 0 || !strings.Contains(out, "r1") {
		t.Fatalf("register: exit %d, %q %s", code, out, errs)
	}
	code, out, _ = runCLI(t, env, "racks", "list")
	table, runs, _ := strings.Cut(out, "\n\n")
	// Under the table, what each rack runs: the simulated rack's
	// catalogue, and none yet for r1, whose worker never answered.
	if !strings.Contains(runs, "rack sim-us-1 runs: gpu-container, managed-inference jobs; runtimes vllm, parakeet; any image") ||
		!strings.Contains(runs, "rack r1 runs: not reported yet") {
		t.Errorf("list: the racks' catalogues:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(table), "\n")
	rows := map[string][]string{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		rows[f[0]] = f
	}
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "GPU MODEL") ||
		!slices.Equal(rows["sim-us-1"], []string{"sim-us-1", "us", "GH100_H100_SXM5_80GB", "2", "16", "8", "yes"}) ||
		!slices.Equal(rows["r1"], []string{"r1", "us", "GH100_H100_SXM5_80GB", "0", "0", "0", "no"}) {
		t.Errorf("list: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, env, "racks", "list", "-o", "json")
	var l apiv1.RackList
	if err := json.Unmarshal([]byte(out), &l); code != 0 || err != nil ||
		!slices.ContainsFunc(l.Items, func(r apiv1.Rack) bool { return r.ID == "r1" && r.WorkerKey == key }) {
		t.Errorf("list -o json: %q", out)
	}
	if code, _, errs := runCLI(t, env, "racks", "register", "--id", "r2", "--location", "us", "--gpu-model", "X", "--worker-key", "short"); code != ExitUsage || !strings.Contains(errs, "workerKey") {
		t.Errorf("bad key: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI(t, env, "racks", "register", "--id", "r2"); code != ExitUsage || !strings.Contains(errs, "--location") {
		t.Errorf("missing flags: exit %d, %s", code, errs)
	}
	if code, out, _ := runCLI(t, env, "racks", "remove", "r1", "--force"); code != 0 || out != "removed rack r1\n" {
		t.Errorf("remove: exit %d, %q", code, out)
	}
	if code, _, errs := runCLI(t, env, "racks", "remove", "r1"); code != ExitFailure || !strings.Contains(errs, "not_found") {
		t.Errorf("remove again: exit %d, %s", code, errs)
	}
}

// TestLogin: login checks the token, writes the config with mode 0600, the
// other commands use it, and the environment and flags win over it.
func TestLogin(t *testing.T) {
	e, admin := onPlatform(t)
	apiURL, token := admin[envURL], admin[envToken]
	home := t.TempDir()
	env := map[string]string{"HOME": home, "XDG_CONFIG_HOME": ""}
	path := filepath.Join(home, ".config", "cosmicac", "config.yaml")

	code, _, errs := runCLI(t, env, "login", "--url", apiURL, "--token", "wrong")
	if code != ExitFailure || !strings.Contains(errs, "not logged in or token invalid: run `cosmicac login`") {
		t.Errorf("bad token: exit %d, %s", code, errs)
	}
	if _, err := os.Stat(path); err == nil {
		t.Errorf("a rejected token was saved")
	}
	code, out, errs := runCLI(t, env, "login", "--url", apiURL, "--token-file", e.P.TokenFile)
	if code != 0 || !strings.Contains(out, "as admin (platform admin; team default, role owner)") {
		t.Fatalf("login: exit %d, %q %s", code, out, errs)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config %s: %v %v", path, st, err)
	}
	if c, _ := readConfigFile(path); c != (clientConfig{URL: apiURL, Token: token}) {
		t.Errorf("saved %+v", c)
	}
	if code, _, errs := runCLI(t, env, "jobs", "list"); code != 0 {
		t.Errorf("list with the saved config: exit %d, %s", code, errs)
	}
	// The token from stdin.
	if code, _, errs := runCLIIn(t, env, token+"\n", "login", "--url", apiURL); code != 0 {
		t.Errorf("login from stdin: exit %d, %s", code, errs)
	}

	// The environment wins over the file, the flags over both.
	envBad := maps.Clone(env)
	envBad[envToken] = "wrong"
	if code, _, errs := runCLI(t, envBad, "jobs", "list"); code != ExitFailure || !strings.Contains(errs, "not logged in") {
		t.Errorf("$COSMICAC_TOKEN over the file: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI(t, envBad, "jobs", "list", "--token", token); code != 0 {
		t.Errorf("--token over $COSMICAC_TOKEN: exit %d, %s", code, errs)
	}
	envURLOnly := maps.Clone(env)
	envURLOnly[envURL] = closedURL(t)
	code, _, errs = runCLI(t, envURLOnly, "jobs", "list")
	if code != ExitFailure || !strings.Contains(errs, "cannot reach CosmicAC at "+envURLOnly[envURL]+": is `cosmicac up` running?") {
		t.Errorf("$COSMICAC_URL over the file: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI(t, envURLOnly, "racks", "list", "--url", apiURL); code != 0 {
		t.Errorf("--url over $COSMICAC_URL: exit %d, %s", code, errs)
	}
}

// closedURL is the URL of a port nothing listens on.
func closedURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func TestCompletion(t *testing.T) {
	e, env := onPlatform(t)
	j := e.Create(cosmictest.Container("train", 1))
	e.WaitState(j.ID, cosmic.StateRunning)
	for _, sh := range []string{"bash", "zsh", "fish"} {
		if code, out, errs := runCLI(t, nil, "completion", sh); code != 0 || !strings.Contains(out, "cosmicac") {
			t.Errorf("completion %s: exit %d, %s", sh, code, errs)
		}
	}
	code, out, errs := runCLI(t, env, "__complete", "jobs", "get", j.ID[:2])
	if code != 0 || !strings.Contains(out, j.ID+"\ttrain running") {
		t.Errorf("job ID completion: exit %d, %q %s", code, out, errs)
	}
	code, out, _ = runCLI(t, nil, "__complete", "jobs", "list", "--state", "")
	if code != 0 || !strings.Contains(out, "degraded") {
		t.Errorf("--state completion: %q", out)
	}
}
