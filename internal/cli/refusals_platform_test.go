package cli

import (
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/cosmictest"
)

// What the platform refuses, through the CLI against the whole platform:
// a job that could never fit (exit 1, the field, its reason's fix, nothing
// stored), a second job of a name, a running job's delete without
// --force (which the message names), and a gpu-container job's replica
// delete.
func TestRefusalsOnThePlatform(t *testing.T) {
	e := cosmictest.NewEnv(t)
	tok, err := e.P.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COSMICAC_URL": e.P.URL, "COSMICAC_TOKEN": tok, "HOME": t.TempDir()}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--gpus", "9"}, []string{"invalid: resources.gpu:", "largest node in us holds 8", "fix (exceeds_node_gpus):"}},
		{[]string{"--gpu-model", "GB200"}, []string{"invalid: resources.gpuModel:", "fix (no_such_gpu_model):"}},
		{[]string{"--location", "eu"}, []string{`invalid: location: no rack is registered in location "eu"`, "fix (no_such_location):"}},
	} {
		args := append([]string{"jobs", "create", "--image", "ubuntu:24.04", "--location", "us"}, tc.args...)
		code, out, errs := runCLI(t, env, args...)
		if code != ExitFailure || out != "" {
			t.Errorf("%v: exit %d, stdout %q", tc.args, code, out)
		}
		for _, w := range tc.want {
			if strings.Count(errs, w) != 1 {
				t.Errorf("%v: stderr %q, want %q once", tc.args, errs, w)
			}
		}
	}
	if l, err := e.Client.ListJobs(e.Ctx, client.ListOptions{}); err != nil || l.Total != 0 {
		t.Fatalf("refused jobs stored: %+v, %v", l, err)
	}

	code, _, errs := runCLI(t, env, "jobs", "create", "--name", "train", "--image", "ubuntu:24.04", "--location", "us", "--wait")
	if code != 0 {
		t.Fatalf("create train: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI(t, env, "jobs", "create", "--name", "train", "--image", "ubuntu:24.04", "--location", "us"); code != ExitFailure ||
		!strings.Contains(errs, `conflict: a job named "train" exists in team default`) {
		t.Errorf("a second train: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI(t, env, "jobs", "delete", "train", "--replica", "0"); code != ExitFailure ||
		!strings.Contains(errs, "only a managed-inference job's replicas can be deleted one by one") {
		t.Errorf("delete a gpu-container job's replica: exit %d, %s", code, errs)
	}
	code, _, errs = runCLI(t, env, "jobs", "delete", "train")
	if code != ExitFailure || !strings.Contains(errs, "is running: kill it first") || !strings.Contains(errs, "--force` to kill and delete it") {
		t.Errorf("delete a running job: exit %d, %s", code, errs)
	}
	if j, err := e.Client.ListJobs(e.Ctx, client.ListOptions{Name: "train"}); err != nil || len(j.Items) != 1 || j.Items[0].Status.State != cosmic.StateRunning {
		t.Fatalf("train after the refused delete: %+v, %v", j, err)
	}
	if code, out, errs := runCLI(t, env, "jobs", "delete", "train", "--force"); code != 0 || !strings.Contains(out, "being deleted") {
		t.Errorf("delete --force: exit %d, %q %s", code, out, errs)
	}
}
