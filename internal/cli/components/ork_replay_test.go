package components

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cli"
)

// TestOrkReplay: the replay's output on small files with a known answer,
// its summary, and its usage errors (exit 2, naming file and line).
func TestOrkReplay(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	nodes := write("nodes.csv", "name,gpus,gpu_model,cpu_milli,memory_mib,rack\nn1,8,H100,16000,65536,r1\nn2,8,H100,64000,65536,r1\n")
	pods := write("pods.csv", "name,gpus,cpu_milli,memory_mib\nsmall,1,4000,1024\nheavy,1,32000,1024\nhuge,1,100000,1024\nall,8,1000,1024\n")

	code, out, errs := runCLI(t, nil, "ork", "replay", "--nodes", nodes, "--pods", pods, "--policy", "best-fit")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// heavy needs n2's CPU; huge fits no node; all fits n1 no more (7 free)
	// and n2 has 7 free GPUs too.
	want := "name,node,gpus\nsmall,n1,0\nheavy,n2,0\nhuge,,\nall,,\n"
	if out != want {
		t.Errorf("stdout\n%s\nwant\n%s", out, want)
	}
	if !regexp.MustCompile(`^policy best-fit: 2 of 4 pods placed, 2 of 16 GPUs allocated; 87\.50% of GPUs unallocated at the end \(arrived GPU demand never reached 100% of the fleet\); 4 decisions in \S+, \d+ decisions/s\n$`).MatchString(errs) {
		t.Errorf("stderr %q", errs)
	}

	bad := write("bad.csv", "name,gpus,gpu_model,cpu_milli,memory_mib\nn1,8,H100,16000,lots\n")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--nodes", bad, "--pods", pods}, "bad.csv:2: memory_mib \"lots\""},
		{[]string{"--nodes", nodes, "--pods", filepath.Join(dir, "missing.csv")}, "missing.csv"},
		{[]string{"--nodes", nodes}, "give --nodes FILE and --pods FILE"},
		{[]string{"--nodes", nodes, "--pods", pods, "--policy", "worst-fit"}, `--policy "worst-fit"`},
		{[]string{"--nodes", nodes, "--pods", pods, "--workload", "sideways"}, `--workload "sideways": want online or trace`},
	} {
		code, out, errs := runCLI(t, nil, append([]string{"ork", "replay"}, tt.args...)...)
		if code != cli.ExitUsage || out != "" || !strings.Contains(errs, tt.want) {
			t.Errorf("replay %v: exit %d, stdout %q, stderr %q; want exit %d naming %q", tt.args, code, out, errs, cli.ExitUsage, tt.want)
		}
	}
}
