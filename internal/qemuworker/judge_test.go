package qemuworker

import (
	"errors"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// TestJudgeAgentReport: a row per case of what an agent's report does to
// its replica.
func TestJudgeAgentReport(t *testing.T) {
	badCredentials := cosmic.NewReason(cosmic.ReasonBadCredentials, "volume 0 (/data): refused")
	code := func(n int) *int { return &n }
	exited := func(n int) *agentapi.CommandStatus {
		return &agentapi.CommandStatus{State: "exited", ExitCode: code(n)}
	}
	for _, tc := range []struct {
		name      string
		state     cosmic.State
		vmUp      bool
		ready     bool
		report    agentapi.WorkerReport
		connected bool
		exit      *int
		failure   bool
	}{
		{"starting, first ready: runs", cosmic.StateStarting, true, false, agentapi.WorkerReport{Ready: true}, true, nil, false},
		{"running, ready again: nothing", cosmic.StateRunning, true, true, agentapi.WorkerReport{Ready: true}, false, nil, false},
		{"starting, not ready: nothing", cosmic.StateStarting, true, false, agentapi.WorkerReport{}, false, nil, false},
		{"running, the command exits 0: ends", cosmic.StateRunning, true, true, agentapi.WorkerReport{Ready: true, Command: exited(0)}, false, code(0), false},
		{"running, the command exits 3: ends", cosmic.StateRunning, true, true, agentapi.WorkerReport{Ready: true, Command: exited(3)}, false, code(3), false},
		{"first ready with the command already exited: runs, then ends", cosmic.StateStarting, true, false, agentapi.WorkerReport{Ready: true, Command: exited(1)}, true, code(1), false},
		{"starting, an exit before ready: nothing", cosmic.StateStarting, true, false, agentapi.WorkerReport{Command: exited(0)}, false, nil, false},
		{"running, a command still running: nothing", cosmic.StateRunning, true, true, agentapi.WorkerReport{Ready: true, Command: &agentapi.CommandStatus{State: "running"}}, false, nil, false},
		{"an exit without a code: nothing", cosmic.StateRunning, true, true, agentapi.WorkerReport{Ready: true, Command: &agentapi.CommandStatus{State: "exited"}}, false, nil, false},
		{"the VM is down: nothing", cosmic.StateStarting, false, false, agentapi.WorkerReport{Ready: true, Command: exited(0)}, false, nil, false},
		{"restarting: nothing", cosmic.StateRestarting, true, false, agentapi.WorkerReport{Ready: true}, false, nil, false},
		{"stopped: nothing", cosmic.StateStopped, true, true, agentapi.WorkerReport{Ready: true, Command: exited(0)}, false, nil, false},
		{"starting, a volume not copied in: fails", cosmic.StateStarting, true, false, agentapi.WorkerReport{Failure: &badCredentials}, false, nil, true},
		{"the VM is down, a failure: nothing", cosmic.StateStarting, false, false, agentapi.WorkerReport{Failure: &badCredentials}, false, nil, false},
	} {
		v := judgeAgentReport(tc.state, tc.vmUp, tc.ready, tc.report)
		if (v.failure != nil) != tc.failure || v.failure != nil && v.failure.Code != cosmic.ReasonBadCredentials {
			t.Errorf("%s: failure %+v, want one: %v", tc.name, v.failure, tc.failure)
		}
		if v.connected != tc.connected || (v.exit == nil) != (tc.exit == nil) || v.exit != nil && *v.exit != *tc.exit {
			t.Errorf("%s: connected %v exit %v, want %v %v", tc.name, v.connected, deref(v.exit), tc.connected, deref(tc.exit))
		}
	}
}

// TestJudgeVMExit: a row per case of what a VM's end does to its replica.
func TestJudgeVMExit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		state   cosmic.State
		err     error
		console string
		crashed bool
		detail  string
	}{
		{"stopped (Stop, Delete, the command's exit): expected", cosmic.StateStopped, nil, "x", false, ""},
		{"failed already (a refusal, the command's failure): expected", cosmic.StateFailed, errors.New("exit status 1"), "x", false, ""},
		{"running, the guest powered off", cosmic.StateRunning, nil, "", true, "the VM powered off"},
		{"running, QEMU died, with the console", cosmic.StateRunning, errors.New("signal: killed"), "Kernel panic", true, "signal: killed; console: Kernel panic"},
		{"starting, QEMU exited", cosmic.StateStarting, errors.New("exit status 1"), "", true, "exit status 1"},
		{"restarting (a reboot that did not come back)", cosmic.StateRestarting, nil, "reboot: Power down", true, "the VM powered off; console: reboot: Power down"},
	} {
		read := false
		v := judgeVMExit(tc.state, tc.err, func() string { read = true; return tc.console })
		if v.crashed != tc.crashed || v.detail != tc.detail {
			t.Errorf("%s: crashed %v %q, want %v %q", tc.name, v.crashed, v.detail, tc.crashed, tc.detail)
		}
		if v.crashed && (v.reason.Code != cosmic.ReasonVMICrashed || !strings.Contains(v.reason.Message, tc.detail)) {
			t.Errorf("%s: reason %+v, want vmi_crashed naming %q", tc.name, v.reason, tc.detail)
		}
		if !v.crashed && read {
			t.Errorf("%s: read the console of an expected end", tc.name)
		}
	}
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestJudgeBootFailure: a row per step of a boot that can fail, and the
// reason its replica fails with.
func TestJudgeBootFailure(t *testing.T) {
	err := errors.New("boom")
	for _, tc := range []struct {
		name string
		step bootStep
		want cosmic.ReasonCode
	}{
		{"the image left the catalogue after Apply", stepImage, cosmic.ReasonNotInCatalogue},
		{"the agent's key could not be kept", stepIdentity, cosmic.ReasonImportFailed},
		{"the seed could not be written", stepSeed, cosmic.ReasonImportFailed},
		{"the agent disk could not be made", stepAgentDisk, cosmic.ReasonImportFailed},
		{"the replica's disk could not be made", stepDisk, cosmic.ReasonImportFailed},
		{"QEMU would not start", stepStart, cosmic.ReasonVMICrashed},
	} {
		got := judgeBootFailure(tc.step, err)
		if got.Code != tc.want || !strings.HasSuffix(got.Message, ": boom") {
			t.Errorf("%s: %s %q, want %s ending in the error", tc.name, got.Code, got.Message, tc.want)
		}
	}
}
