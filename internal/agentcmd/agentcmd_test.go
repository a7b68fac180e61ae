package agentcmd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/version"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// TestCommandLine: cosmicac-agent's wrong command lines exit 2 with the
// reason, as cosmicac's do; both spellings of the agents exist.
func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"instance"}, 2, "--config FILE is required"},
		{[]string{"agent", "inference"}, 2, "--config FILE is required"},
		{[]string{"inference", "--config", "/nonexistent/agent.yaml"}, 2, "nonexistent"},
		{[]string{"instance", "--bogus"}, 2, "unknown flag: --bogus"},
		{[]string{"instance", "extra"}, 2, "unknown command"},
		{[]string{"shell"}, 2, `unknown command "shell"`},
		{[]string{"version"}, 0, ""},
	} {
		var out, errb bytes.Buffer
		code := Run(context.Background(), tc.args, &out, &errb)
		if code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("cosmicac-agent %s: exit %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), code, errb.String(), tc.code, tc.want)
		}
	}
	var out bytes.Buffer
	if Run(context.Background(), []string{"version"}, &out, &out); out.String() != version.Long() {
		t.Errorf("version printed %q, want %q", out.String(), version.Long())
	}
}

// TestUnitCommandLineRunsTheAgent: the VM's unit line, `BIN agent
// instance --config FILE`, run by cosmicac-agent, brings the instance
// agent up: it reaches its worker, says it is ready, and stops cleanly
// (exit 0) when its context ends.
func TestUnitCommandLineRunsTheAgent(t *testing.T) {
	agentID, err := fabric.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "agent.key")
	if err := fabric.WriteIdentityFile(keyFile, agentID); err != nil {
		t.Fatal(err)
	}
	workerID, err := fabric.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	wn, err := fabric.New(fabric.Config{Component: "wrk-test", Identity: workerID, Listen: "127.0.0.1:0", Policy: fabric.NewAllowList(agentID.PublicKey())})
	if err != nil {
		t.Fatal(err)
	}
	defer wn.Close()
	cfg := filepath.Join(dir, "agent.yaml")
	body := fmt.Sprintf("jobId: 0b7c54a8-5f0e-4c1e-9d3a-2f6b8e1c4d70\nreplica: 0\nvmiIndex: 0\nidentityFile: %s\nlisten: 127.0.0.1:0\n"+
		"peers:\n- {role: worker, key: %s, addrs: [%s]}\n", keyFile, workerID.PublicKey(), wn.Addr())
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"agent", "instance", "--config", cfg, "--metrics-listen", "127.0.0.1:0"}, &out, &errb)
	}()
	want := "agent " + agentID.PublicKey().String() + " ready (job 0b7c54a8-5f0e-4c1e-9d3a-2f6b8e1c4d70)"
	deadline := time.After(30 * time.Second)
	for !strings.Contains(out.String(), want) {
		select {
		case code := <-done:
			t.Fatalf("the agent ended (exit %d) before it was ready: %s%s", code, out.String(), errb.String())
		case <-deadline:
			t.Fatalf("the agent never said it was ready: %s%s", out.String(), errb.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if code := <-done; code != 0 && code != 130 {
		t.Errorf("the agent stopped with exit %d: %s", code, errb.String())
	}
}

type syncBuffer = waittest.Buffer
