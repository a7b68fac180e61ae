package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// runCLIIn is runCLI with stdin.
func runCLIIn(t *testing.T, env map[string]string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	a := &app{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := a.run(ctx, args)
	return code, out.String(), errb.String()
}

func TestJobsCreate(t *testing.T) {
	f := newFakeAPI(t)
	env := f.env()
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
	f := newFakeAPI(t)
	code, _, errs := runCLI(t, f.env(), "jobs", "create", "--gpus", "2000", "--env", "COSMICAC_X=1", "--http-port", "70000")
	if code != ExitUsage {
		t.Fatalf("exit %d, want %d: %s", code, ExitUsage, errs)
	}
	for _, field := range []string{"location", "image", "resources.gpu", "envVars[0].name", "defaultHttpPort"} {
		if !strings.Contains(errs, "\n  "+field+": ") {
			t.Errorf("stderr does not name %s:\n%s", field, errs)
		}
	}
	if r := f.requests(); len(r) != 0 {
		t.Errorf("local validation failure called the API: %v", r)
	}
	for name, args := range map[string][]string{
		"bad flag value": {"jobs", "create", "--gpus", "many"},
		"no GPUs":        {"jobs", "create", "--location", "us", "--image", "x", "--gpus", "0"},
		"no replicas":    {"jobs", "create", "--location", "us", "--model", "org/m", "--replicas", "0"},
		"unknown flag":   {"jobs", "create", "--gpu", "1"},
		"bad -o":         {"jobs", "create", "--location", "us", "--image", "x", "-o", "xml"},
		"missing file":   {"jobs", "create", "-f", "/nonexistent.yaml"},
	} {
		if code, _, errs := runCLI(t, f.env(), args...); code != ExitUsage {
			t.Errorf("%s: exit %d, want %d: %s", name, code, ExitUsage, errs)
		}
	}
	code, _, errs = runCLI(t, f.env(), "jobs", "create", "--location", "eu", "--image", "ubuntu")
	if code != ExitFailure || !strings.Contains(errs, "error: invalid: the job spec is invalid\n  location: no rack") {
		t.Errorf("API 400: exit %d, stderr %q", code, errs)
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

func TestJobsCreateWait(t *testing.T) {
	f := newFakeAPI(t)
	reason := cosmic.NewReason(cosmic.ReasonImportFailed, "image not found")
	queued := cosmic.Status{State: cosmic.StateQueued, QueuePosition: 1, WaitingFor: "8 × GH100_H100_SXM5_80GB in us"}
	starting := cosmic.Status{State: cosmic.StateStarting, Progress: &cosmic.Progress{Step: "import_disk", Percent: 40}}
	args := []string{"jobs", "create", "--location", "us", "--image", "ubuntu", "--wait", "--poll-interval", "5ms"}

	f.script = []cosmic.Status{queued, queued, {State: cosmic.StatePending}, starting, starting, {State: cosmic.StateRunning}}
	code, out, errs := runCLI(t, f.env(), args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := waitLines(errs)
	want := []string{"queued", "queued (position 1: waiting for 8 × GH100_H100_SXM5_80GB in us)", "pending", "starting: import_disk 40%", "running"}
	if d := cmp.Diff(want, lines[1:]); d != "" || !strings.HasPrefix(lines[0], "job ") {
		t.Errorf("stderr (-want +got):\n%s\n%s", d, errs)
	}
	if !strings.Contains(out, "running") {
		t.Errorf("stdout %q", out)
	}

	f.script = []cosmic.Status{queued, starting, {State: cosmic.StateFailed, Reason: &reason}}
	code, _, errs = runCLI(t, f.env(), args...)
	if code != ExitJobFailed {
		t.Fatalf("failed job: exit %d, want %d: %s", code, ExitJobFailed, errs)
	}
	for _, s := range []string{"] failed: import_failed\n", "import_failed: " + reason.Message, "fix: " + reason.Fix} {
		if !strings.Contains(errs, s) {
			t.Errorf("stderr lacks %q:\n%s", s, errs)
		}
	}
}

func TestJobsList(t *testing.T) {
	f := newFakeAPI(t)
	now := time.Now()
	ids := []string{"11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222", "23333333-3333-4333-8333-333333333333"}
	f.addJob(ids[0], "a", cosmic.StateRunning, map[string]string{"team": "ml"}, now.Add(-3*time.Hour))
	f.addJob(ids[1], "", cosmic.StateQueued, nil, now.Add(-90*time.Second))
	f.addJob(ids[2], "c", cosmic.StateFailed, map[string]string{"team": "ml"}, now.Add(-72*time.Hour))

	code, out, errs := runCLI(t, f.env(), "jobs", "list")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "ID NAME TYPE STATE REASON GPUS LOCATION AGE USER" {
		t.Fatalf("table:\n%s", out)
	}
	if got := strings.Fields(lines[1]); !slices.Equal(got, []string{ids[2], "c", "gpu-container", "failed", "-", "1", "us", "3d", "alice"}) {
		t.Errorf("row %q", got)
	}
	if got := strings.Fields(lines[2]); got[1] != "-" || got[7] != "90s" {
		t.Errorf("row %q", got)
	}

	code, out, _ = runCLI(t, f.env(), "jobs", "list", "--state", "running,failed", "--label", "team=ml", "--user", "alice",
		"--sort", "name", "--order", "asc", "--size", "1", "--page", "1", "-o", "json")
	var l apiv1.JobList
	if err := json.Unmarshal([]byte(out), &l); code != 0 || err != nil || l.Total != 2 || len(l.Items) != 1 {
		t.Fatalf("-o json: exit %d, %q (%v)", code, out, err)
	}
	last := f.requests()[len(f.requests())-1]
	for _, q := range []string{"statusState=running", "statusState=failed", "labelSelector=team%3Dml", "userName=alice", "sort=name", "order=asc", "size=1", "page=1"} {
		if !strings.Contains(last, q) {
			t.Errorf("query %q lacks %s", last, q)
		}
	}

	code, out, _ = runCLI(t, f.env(), "jobs", "list", "--all", "-o", "yaml")
	if err := yaml.Unmarshal([]byte(out), &l); code != 0 || err != nil || len(l.Items) != 3 {
		t.Errorf("--all -o yaml: exit %d, %q (%v)", code, out, err)
	}
	code, _, errs = runCLI(t, f.env(), "jobs", "list", "--size", "2")
	if code != 0 || !strings.Contains(errs, "showing 2 of 3 jobs") {
		t.Errorf("paged table: exit %d, stderr %q", code, errs)
	}
	if code, _, _ := runCLI(t, f.env(), "jobs", "list", "--state", "sleeping"); code != ExitUsage {
		t.Errorf("bad state: exit %d", code)
	}
}

func TestJobActions(t *testing.T) {
	f := newFakeAPI(t)
	id := "3f2a9c1e-0b7d-4c1e-9a55-2b8e4f6d7a10"
	f.addJob(id, "train", cosmic.StateRunning, nil, time.Now())
	f.addJob("3f000000-0b7d-4c1e-9a55-2b8e4f6d7a10", "other", cosmic.StateQueued, nil, time.Now())
	env := f.env()

	code, out, errs := runCLI(t, env, "jobs", "get", "3f2a")
	if code != 0 || !strings.Contains(out, "ID:") || !strings.Contains(out, id) || !strings.Contains(out, "State:") {
		t.Errorf("get by prefix: exit %d, %q %s", code, out, errs)
	}
	if code, _, errs := runCLI(t, env, "jobs", "get", "3f"); code != ExitUsage || !strings.Contains(errs, "ambiguous") {
		t.Errorf("ambiguous prefix: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI(t, env, "jobs", "get", "ffff"); code != ExitFailure || !strings.Contains(errs, `no job is named "ffff" or has an ID starting with it`) {
		t.Errorf("unknown prefix: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI(t, env, "jobs", "get", "not-a-uuid!"); code != ExitFailure || !strings.Contains(errs, `no job is named "not-a-uuid!"`) {
		t.Errorf("unknown name: exit %d, %s", code, errs)
	}
	if code, out, errs := runCLI(t, env, "jobs", "get", "train"); code != 0 || !strings.Contains(out, id) {
		t.Errorf("get by name: exit %d, %q %s", code, out, errs)
	}
	if code, _, errs := runCLI(t, env, "jobs", "get", "ffffffff-0b7d-4c1e-9a55-2b8e4f6d7a10"); code != ExitFailure || !strings.Contains(errs, "not_found: no job") {
		t.Errorf("unknown ID: exit %d, %s", code, errs)
	}
	code, out, _ = runCLI(t, env, "jobs", "get", id, "-o", "json")
	var j cosmic.Job
	if err := json.Unmarshal([]byte(out), &j); code != 0 || err != nil || j.ID != id {
		t.Errorf("get -o json: exit %d, %q", code, out)
	}

	for _, c := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"label", id, "team=ml"}, 0, "label team=ml"},
		{[]string{"label", id, "bad key=x"}, ExitUsage, ""},
		{[]string{"label", id, "team-"}, 0, "label team removed"},
		{[]string{"restart", id}, 0, "restarting job " + id + " (restarting)"},
		{[]string{"restart", id, "--replica", "0"}, 0, "restarting replica 0"},
		{[]string{"delete", id, "--replica", "1"}, 0, "deleted replica 1"},
		{[]string{"kill", id}, 0, "killed job " + id + " (stopped)"},
	} {
		code, out, errs := runCLI(t, env, append([]string{"jobs"}, c.args...)...)
		if code != c.code || !strings.Contains(out, c.out) {
			t.Errorf("%v: exit %d, %q %s", c.args, code, out, errs)
		}
	}
	f.mu.Lock()
	f.jobs[0].Status.State = cosmic.StateRunning
	f.mu.Unlock()
	if code, _, errs := runCLI(t, env, "jobs", "delete", id); code != ExitFailure || !strings.Contains(errs, "conflict: the job is running") {
		t.Errorf("delete running: exit %d, %s", code, errs)
	}
	if code, out, errs := runCLI(t, env, "jobs", "delete", id, "--force"); code != 0 || !strings.Contains(out, "deleted job "+id) {
		t.Errorf("delete --force: exit %d, %q %s", code, out, errs)
	}
}

func TestJobsCommand(t *testing.T) {
	f := newFakeAPI(t)
	code, out, errs := runCLIIn(t, f.env(), `{"type":"gpu-container","location":"us","image":"ubuntu","partnerId":"p"}`, "jobs", "command", "-f", "-", "--name", "x y")
	if code != 0 || out != "cosmicac jobs create --type gpu-container --name 'x y' --location us --image ubuntu\n" {
		t.Errorf("exit %d, %q, %s", code, out, errs)
	}
	if !strings.Contains(errs, "partnerId") || !strings.Contains(errs, cosmic.FileCommand) {
		t.Errorf("no note about unexpressed fields: %q", errs)
	}
}

func TestRacks(t *testing.T) {
	f := newFakeAPI(t)
	key := strings.Repeat("ab", 32)
	code, out, errs := runCLI(t, f.env(), "racks", "register", "--id", "r1", "--location", "us", "--gpu-model", "GH100_H100_SXM5_80GB",
		"--worker-key", key, "--worker-addr", "127.0.0.1:7000")
	if code != 0 || !strings.Contains(out, "r1") {
		t.Fatalf("register: exit %d, %q %s", code, out, errs)
	}
	f.mu.Lock()
	f.racks[0].Nodes = make([]cosmic.Node, 2)
	f.racks[0].GPUs, f.racks[0].FreeGPUs, f.racks[0].Reachable = 16, 8, true
	f.mu.Unlock()
	code, out, _ = runCLI(t, f.env(), "racks", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "GPU MODEL") ||
		!slices.Equal(strings.Fields(lines[1]), []string{"r1", "us", "GH100_H100_SXM5_80GB", "2", "16", "8", "yes"}) {
		t.Errorf("list: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, f.env(), "racks", "list", "-o", "json")
	var l apiv1.RackList
	if err := json.Unmarshal([]byte(out), &l); code != 0 || err != nil || l.Items[0].WorkerKey != key {
		t.Errorf("list -o json: %q", out)
	}
	if code, _, errs := runCLI(t, f.env(), "racks", "register", "--id", "r2", "--location", "us", "--gpu-model", "X", "--worker-key", "short"); code != ExitUsage || !strings.Contains(errs, "workerKey") {
		t.Errorf("bad key: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI(t, f.env(), "racks", "register", "--id", "r2"); code != ExitUsage || !strings.Contains(errs, "--location") {
		t.Errorf("missing flags: exit %d, %s", code, errs)
	}
	if code, out, _ := runCLI(t, f.env(), "racks", "remove", "r1", "--force"); code != 0 || out != "removed rack r1\n" {
		t.Errorf("remove: exit %d, %q", code, out)
	}
	if code, _, errs := runCLI(t, f.env(), "racks", "remove", "r1"); code != ExitFailure || !strings.Contains(errs, "not_found") {
		t.Errorf("remove again: exit %d, %s", code, errs)
	}
}

// TestLogin: login checks the token, writes the config with mode 0600, the
// other commands use it, and the environment and flags win over it.
func TestLogin(t *testing.T) {
	f := newFakeAPI(t)
	home := t.TempDir()
	env := map[string]string{"HOME": home, "XDG_CONFIG_HOME": ""}
	path := filepath.Join(home, ".config", "cosmicac", "config.yaml")

	code, _, errs := runCLI(t, env, "login", "--url", f.srv.URL, "--token", "wrong")
	if code != ExitFailure || !strings.Contains(errs, "not logged in or token invalid: run `cosmicac login`") {
		t.Errorf("bad token: exit %d, %s", code, errs)
	}
	if _, err := os.Stat(path); err == nil {
		t.Errorf("a rejected token was saved")
	}
	tokenFile := filepath.Join(t.TempDir(), "admin.token")
	os.WriteFile(tokenFile, []byte(fakeToken+"\n"), 0o600)
	code, out, errs := runCLI(t, env, "login", "--url", f.srv.URL, "--token-file", tokenFile)
	if code != 0 || !strings.Contains(out, "as admin (team default, role admin)") {
		t.Fatalf("login: exit %d, %q %s", code, out, errs)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config %s: %v %v", path, st, err)
	}
	if c, _ := readConfigFile(path); c != (clientConfig{URL: f.srv.URL, Token: fakeToken}) {
		t.Errorf("saved %+v", c)
	}
	if code, _, errs := runCLI(t, env, "jobs", "list"); code != 0 {
		t.Errorf("list with the saved config: exit %d, %s", code, errs)
	}
	// The token from stdin.
	if code, _, errs := runCLIIn(t, env, fakeToken+"\n", "login", "--url", f.srv.URL); code != 0 {
		t.Errorf("login from stdin: exit %d, %s", code, errs)
	}

	// The environment wins over the file, the flags over both.
	envBad := maps.Clone(env)
	envBad[envToken] = "wrong"
	if code, _, errs := runCLI(t, envBad, "jobs", "list"); code != ExitFailure || !strings.Contains(errs, "not logged in") {
		t.Errorf("$COSMICAC_TOKEN over the file: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI(t, envBad, "jobs", "list", "--token", fakeToken); code != 0 {
		t.Errorf("--token over $COSMICAC_TOKEN: exit %d, %s", code, errs)
	}
	envURLOnly := maps.Clone(env)
	envURLOnly[envURL] = closedURL(t)
	code, _, errs = runCLI(t, envURLOnly, "jobs", "list")
	if code != ExitFailure || !strings.Contains(errs, "cannot reach CosmicAC at "+envURLOnly[envURL]+": is `cosmicac up` running?") {
		t.Errorf("$COSMICAC_URL over the file: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI(t, envURLOnly, "racks", "list", "--url", f.srv.URL); code != 0 {
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
	f := newFakeAPI(t)
	id := "3f2a9c1e-0b7d-4c1e-9a55-2b8e4f6d7a10"
	f.addJob(id, "train", cosmic.StateRunning, nil, time.Now())
	for _, sh := range []string{"bash", "zsh", "fish"} {
		if code, out, errs := runCLI(t, nil, "completion", sh); code != 0 || !strings.Contains(out, "cosmicac") {
			t.Errorf("completion %s: exit %d, %s", sh, code, errs)
		}
	}
	code, out, errs := runCLI(t, f.env(), "__complete", "jobs", "get", "3f")
	if code != 0 || !strings.Contains(out, id+"\ttrain running") {
		t.Errorf("job ID completion: exit %d, %q %s", code, out, errs)
	}
	code, out, _ = runCLI(t, nil, "__complete", "jobs", "list", "--state", "")
	if code != 0 || !strings.Contains(out, "degraded") {
		t.Errorf("--state completion: %q", out)
	}
}
