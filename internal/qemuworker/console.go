package qemuworker

import (
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/cosmicac/cosmicac/internal/qemu"
	"github.com/cosmicac/cosmicac/internal/vmboot"
)

// A boot's steps, in the order a boot reaches them, and how far each is
// (the replica's progress while it starts). The worker's own come first;
// bootloader to cloud_init_done are what the guest says on its serial
// console (consoleMilestone); agent_connected is the agent's report.
var stepPercent = map[string]int{
	"prepare_disk":    10,
	"write_seed":      15,
	"boot":            20,
	"bootloader":      25,
	"kernel":          30,
	"systemd":         40,
	"cloud_init":      55,
	"agent_started":   75,
	"cloud_init_done": 90,
	"agent_connected": 100,
}

// milestone is a line of the guest's serial console that says how far its
// boot is, as a system record of the replica's log.
type milestone struct {
	// step is the boot step it reaches (a key of stepPercent), or
	// "console" for a line that moves no step (a failure).
	step string
	// key tells milestones apart: each is recorded once a boot.
	key  string
	ok   bool
	line string
}

// maxMilestones bounds the records one boot's console makes: the guest's
// root can print anything on it.
const maxMilestones = 24

// consolePoll is how often a booting VM's console is read.
const consolePoll = 500 * time.Millisecond

var (
	// ansiEscape is a terminal control sequence (systemd's colours, GRUB's
	// screen clearing).
	ansiEscape = regexp.MustCompile(`\x1b(\[[0-9;?]*[ -/]*[@-~]|[@-Z\\-_])`)
	// kernelTime is the kernel's timestamp before its messages.
	kernelTime = regexp.MustCompile(`^\[\s*\d+\.\d+\]\s*`)

	grubBooting    = regexp.MustCompile("^Booting `(.+)'$")
	grubLoading    = regexp.MustCompile(`^Loading Linux (\S+)`)
	kernelVersion  = regexp.MustCompile(`^Linux version (\S+)`)
	systemdWelcome = regexp.MustCompile(`^Welcome to (.+)!$`)
	systemdRunning = regexp.MustCompile(`systemd\[1\]: systemd (\S+) running in system mode`)
	cloudInitPhase = regexp.MustCompile(`Cloud-init v\. (\S+) running '([^']+)'`)
	cloudInitDone  = regexp.MustCompile(`Cloud-init v\. (\S+) finished at .*Up ([0-9.]+) seconds`)
	unitStarted    = regexp.MustCompile(`^\[\s*OK\s*\] Started (.+?)\.?$`)
	unitFailed     = regexp.MustCompile(`^\[FAILED\] Failed to start (.+?)\.?$`)
	kernelPanic    = regexp.MustCompile(`Kernel panic - not syncing: (.*)`)
)

// consoleLine is a console line as a person reads it: without terminal
// escapes, carriage returns and the kernel's timestamp.
func consoleLine(s string) string {
	s = ansiEscape.ReplaceAllString(s, "")
	if i := strings.LastIndexByte(s, '\r'); i >= 0 {
		s = s[i+1:] // what a terminal shows of a line redrawn in place
	}
	s = strings.TrimSpace(s)
	return kernelTime.ReplaceAllString(s, "")
}

// consoleMilestone says whether a line of a guest's serial console (as
// qemu.FollowConsole hands it on) marks a step of its boot, and which:
// the bootloader (GRUB's "Booting `…'" or "Loading Linux"), the kernel
// ("Linux version"), systemd ("Welcome to …!", or its "running in system
// mode"), each phase of cloud-init ("Cloud-init v. … running '…'"), the
// agent's unit started (systemd's status line, or the unit's own
// vmboot.AgentStartedLine in the kernel's log, wherever it lands on a line: the
// kernel writes it after whatever the console holds, such as getty's "login: " prompt),
// and cloud-init finished; and the failures seen
// there: the agent's unit or another failing to start, a kernel panic.
// Pure: the worker records what it returns.
func consoleMilestone(raw string) (milestone, bool) {
	s := consoleLine(raw)
	if s == "" {
		return milestone{}, false
	}
	if m := grubBooting.FindStringSubmatch(s); m != nil {
		return milestone{step: "bootloader", key: "bootloader", ok: true, line: "the bootloader boots " + clip(m[1])}, true
	}
	if m := grubLoading.FindStringSubmatch(s); m != nil {
		return milestone{step: "bootloader", key: "bootloader", ok: true, line: "the bootloader loads Linux " + clip(m[1])}, true
	}
	if m := kernelVersion.FindStringSubmatch(s); m != nil {
		return milestone{step: "kernel", key: "kernel", ok: true, line: "the kernel started: Linux " + clip(m[1])}, true
	}
	if m := systemdWelcome.FindStringSubmatch(s); m != nil {
		return milestone{step: "systemd", key: "systemd", ok: true, line: "systemd started: " + clip(m[1])}, true
	}
	if m := systemdRunning.FindStringSubmatch(s); m != nil {
		return milestone{step: "systemd", key: "systemd", ok: true, line: "systemd " + clip(m[1]) + " started"}, true
	}
	if m := cloudInitDone.FindStringSubmatch(s); m != nil {
		return milestone{step: "cloud_init_done", key: "cloud_init_done", ok: true,
			line: "cloud-init " + clip(m[1]) + " finished, " + clip(m[2]) + " s after the guest's start"}, true
	}
	if m := cloudInitPhase.FindStringSubmatch(s); m != nil {
		return milestone{step: "cloud_init", key: "cloud_init " + clip(m[2]), ok: true,
			line: "cloud-init " + clip(m[1]) + " runs its " + clip(m[2]) + " stage"}, true
	}
	if m := unitStarted.FindStringSubmatch(s); m != nil && agentUnit(m[1]) || strings.Contains(s, vmboot.AgentStartedLine) {
		return milestone{step: "agent_started", key: "agent_started", ok: true,
			line: "the agent's service started in the VM (" + vmboot.AgentUnitName + "); it connects next"}, true
	}
	if m := unitFailed.FindStringSubmatch(s); m != nil {
		if agentUnit(m[1]) {
			return milestone{step: "console", key: "agent_failed", line: "the agent's service failed to start in the VM (" + vmboot.AgentUnitName + "); systemd starts it again"}, true
		}
		return milestone{step: "console", key: "failed " + clip(m[1]), line: "a service failed to start in the VM: " + clip(m[1])}, true
	}
	if m := kernelPanic.FindStringSubmatch(s); m != nil {
		return milestone{step: "console", key: "panic", line: "the guest's kernel panicked: " + clip(m[1])}, true
	}
	return milestone{}, false
}

// agentUnit says whether a unit's name as systemd prints it ("NAME -
// DESCRIPTION", either maybe shortened with "…" to fit the terminal) is
// the agent's (vmboot.Unit: "CosmicAC instance agent").
func agentUnit(s string) bool {
	name, desc, _ := strings.Cut(s, " - ")
	return name == vmboot.AgentUnitName || strings.HasPrefix(desc, "CosmicAC ") && strings.HasSuffix(desc, " agent")
}

// clip keeps what the guest printed short and printable in the records.
func clip(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
	if r := []rune(s); len(r) > 120 {
		s = string(r[:120]) + "…"
	}
	return s
}

// followConsole turns what the console of replica k's boot gen says into
// records of its log ("serial console: …") and, while it starts, the
// replica's progress, until the VM ends, another boot replaces it, or the
// boot has said all it will (the agent connected and cloud-init finished).
// done is the VM's Done.
func (w *Worker) followConsole(k replicaKey, gen int, vm *qemu.VM, done <-chan struct{}, dir string) {
	seen := map[string]bool{}
	qemu.FollowConsole(done, dir, consolePoll, func(line string) bool {
		m, ok := consoleMilestone(line)
		if !ok || seen[m.key] {
			return true
		}
		seen[m.key] = true
		w.mu.Lock()
		defer w.mu.Unlock()
		r := w.replicas[k]
		if r == nil || r.gen != gen || r.vm != vm {
			return false
		}
		if pct, ok := stepPercent[m.step]; !ok || pct <= stepPercent[r.step] {
			// A failure, or a step the boot is past (the agent connected
			// before its service's line was read): a record, the step
			// kept.
			w.emitLocked(r, m.step, m.ok, "serial console: "+m.line)
		} else {
			w.recordLocked(r, m.step, m.ok, "serial console: %s", m.line)
		}
		return len(seen) < maxMilestones && !(r.ready && seen["cloud_init_done"])
	})
}
