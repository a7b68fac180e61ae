package qemuworker

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/qemu"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// realBoot is the serial console of a real boot on the QEMU rack, as QEMU
// wrote it: hack/vm-image.sh's disk-bios.qcow2 (GRUB from the MBR, the
// Debian 12 cloud kernel, systemd, cloud-init 22.4.2 with the rack's
// NoCloud seed, the agent from its disk) under TCG, from
// TestQEMURackFromDisk.
const realBoot = "testdata/console-disk-bios.log"

// TestConsoleMilestone: the lines of a real boot's console that mark its
// steps, as QEMU wrote them (terminal escapes, \r, the kernel's
// timestamps), and lines like them that mark none.
func TestConsoleMilestone(t *testing.T) {
	for name, tc := range map[string]struct {
		line string
		want milestone // zero: no milestone
	}{
		"grub boots an entry": {
			line: "\x1b[H\x1b[J\x1b[1;1H\x1b[H\x1b[J\x1b[1;1H  Booting `Debian GNU/Linux 12 (CosmicAC disk-bios)'",
			want: milestone{step: "bootloader", key: "bootloader", ok: true, line: "the bootloader boots Debian GNU/Linux 12 (CosmicAC disk-bios)"},
		},
		"grub loads linux": {
			line: "\rLoading Linux 6.1.0-57-cloud-amd64 ...",
			want: milestone{step: "bootloader", key: "bootloader", ok: true, line: "the bootloader loads Linux 6.1.0-57-cloud-amd64"},
		},
		"the kernel": {
			line: "\r[    0.000000] Linux version 6.1.0-57-cloud-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14+deb12u1) 12.2.0, GNU ld (GNU Binutils for Debian) 2.40) #1 SMP PREEMPT_DYNAMIC Debian 6.1.192-3 (2026-11-26)",
			want: milestone{step: "kernel", key: "kernel", ok: true, line: "the kernel started: Linux 6.1.0-57-cloud-amd64"},
		},
		"systemd, from the kernel's log": {
			line: "[    7.881241] systemd[1]: systemd 252.39-1~deb12u2 running in system mode (+PAM +AUDIT +SELINUX +APPARMOR)",
			want: milestone{step: "systemd", key: "systemd", ok: true, line: "systemd 252.39-1~deb12u2 started"},
		},
		"systemd's welcome": {
			line: "Welcome to \x1b[1mDebian GNU/Linux 12 (bookworm)\x1b[0m!",
			want: milestone{step: "systemd", key: "systemd", ok: true, line: "systemd started: Debian GNU/Linux 12 (bookworm)"},
		},
		"cloud-init's first stage": {
			line: "[   84.806522] cloud-init[315]: Cloud-init v. 22.4.2 running 'init-local' at Sat, 05 Dec 2026 07:18:06 +0000. Up 83.85 seconds.",
			want: milestone{step: "cloud_init", key: "cloud_init init-local", ok: true, line: "cloud-init 22.4.2 runs its init-local stage"},
		},
		"cloud-init after the login prompt": {
			line: "stock-0 login: [  151.317076] cloud-init[415]: Cloud-init v. 22.4.2 running 'modules:config' at Sat, 05 Dec 2026 07:19:11 +0000. Up 148.31 seconds.",
			want: milestone{step: "cloud_init", key: "cloud_init modules:config", ok: true, line: "cloud-init 22.4.2 runs its modules:config stage"},
		},
		"the agent's unit started": {
			line: "[\x1b[0;32m  OK  \x1b[0m] Started \x1b[0;1;39mcosmicac-agent.service\x1b[0m - CosmicAC instance agent.",
			want: milestone{step: "agent_started", key: "agent_started", ok: true, line: "the agent's service started in the VM (cosmicac-agent.service); it connects next"},
		},
		"the agent's unit started, its name shortened": {
			line: "[\x1b[0;32m  OK  \x1b[0m] Started \x1b[0;1;39mcosmicac-agent.se…e\x1b[0m - CosmicAC inference agent.",
			want: milestone{step: "agent_started", key: "agent_started", ok: true, line: "the agent's service started in the VM (cosmicac-agent.service); it connects next"},
		},
		"the agent's unit says its process started, in the kernel's log": {
			line: "[  158.606824] cosmicac-agent.service: the agent process started",
			want: milestone{step: "agent_started", key: "agent_started", ok: true, line: "the agent's service started in the VM (cosmicac-agent.service); it connects next"},
		},
		"the agent's unit says its process started, after getty's prompt": {
			line: "stock-0 login: [  193.006259] cosmicac-agent.service: the agent process started",
			want: milestone{step: "agent_started", key: "agent_started", ok: true, line: "the agent's service started in the VM (cosmicac-agent.service); it connects next"},
		},
		"cloud-init finished": {
			line: "[  217.264507] cloud-init[438]: Cloud-init v. 22.4.2 finished at Sat, 05 Dec 2026 07:20:18 +0000. Datasource DataSourceNoCloud [seed=/dev/vdb][dsmode=net].  Up 215.52 seconds",
			want: milestone{step: "cloud_init_done", key: "cloud_init_done", ok: true, line: "cloud-init 22.4.2 finished, 215.52 s after the guest's start"},
		},
		"the agent's unit failed": {
			line: "[\x1b[0;1;31mFAILED\x1b[0m] Failed to start \x1b[0;1;39mcosmicac-agent.service\x1b[0m - CosmicAC instance agent.",
			want: milestone{step: "console", key: "agent_failed", line: "the agent's service failed to start in the VM (cosmicac-agent.service); systemd starts it again"},
		},
		"another unit failed": {
			line: "[\x1b[0;1;31mFAILED\x1b[0m] Failed to start \x1b[0;1;39mnetworking.service\x1b[0m - Raise network interfaces.",
			want: milestone{step: "console", key: "failed networking.service - Raise network interfaces", line: "a service failed to start in the VM: networking.service - Raise network interfaces"},
		},
		"a kernel panic": {
			line: "[    1.904000] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)",
			want: milestone{step: "console", key: "panic", line: "the guest's kernel panicked: VFS: Unable to mount root fs on unknown-block(0,0)"},
		},
		"the kernel booting, not grub":                  {line: "[    0.000000] Booting paravirtualized kernel on bare hardware"},
		"the initramfs loading, not grub":               {line: "Loading, please wait..."},
		"the kernel loading certificates, not grub":     {line: "[    2.761693] Loading compiled-in X.509 certificates"},
		"the kernel's command line":                     {line: "[    0.000000] Command line: BOOT_IMAGE=/boot/vmlinuz-6.1.0-57-cloud-amd64 root=LABEL=cosmicac-root ro"},
		"the agent's unit starting, not yet started":    {line: "         Starting \x1b[0;1;39mcosmicac-agent.se…e\x1b[0m - CosmicAC instance agent..."},
		"cloud-init enabling the agent's unit":          {line: "[  192.139592] cloud-init[438]: Created symlink /etc/systemd/system/multi-user.target.wants/cosmicac-agent.service → /etc/systemd/system/cosmicac-agent.service."},
		"another unit started":                          {line: "[\x1b[0;32m  OK  \x1b[0m] Started \x1b[0;1;39mssh.service\x1b[0m - OpenBSD Secure Shell server."},
		"a target reached":                              {line: "[\x1b[0;32m  OK  \x1b[0m] Reached target \x1b[0;1;39mmulti-user.target\x1b[0m - Multi-User System."},
		"cloud-init's ssh keys":                         {line: "<14>Dec  5 07:20:12 cloud-init: -----BEGIN SSH HOST KEY FINGERPRINTS-----"},
		"an empty line":                                 {line: "\r"},
		"a program in the VM echoing the kernel's line": {line: "echo Linux version 9"},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := consoleMilestone(tc.line)
			if ok != (tc.want != milestone{}) {
				t.Fatalf("consoleMilestone(%q) = %+v, %v", tc.line, got, ok)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(milestone{})); diff != "" {
				t.Errorf("consoleMilestone(%q) (-want +got):\n%s", tc.line, diff)
			}
		})
	}
}

// recordSink keeps the records a worker writes.
type recordSink struct {
	mu   sync.Mutex
	recs []joblog.Record
}

func (s *recordSink) Emit(r joblog.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, r)
}

// TestFollowConsoleRealBoot: the worker reads a real boot's console and
// writes each of its steps once in the replica's log, in order, and the
// replica's progress is the last: before, a boot said nothing from "boot"
// until the agent connected, about 95 s under TCG. A step the boot is
// past when its line is read (the agent connected first) is recorded but
// moves no progress back.
func TestFollowConsoleRealBoot(t *testing.T) {
	raw, err := os.ReadFile(realBoot)
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, ready bool) ([]joblog.Record, worker.ReplicaReport) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, qemu.ConsoleFile), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		sink := &recordSink{}
		w := &Worker{opts: Options{Logs: sink}, replicas: map[replicaKey]*replica{}}
		w.queue = worker.NewReportQueue(&w.mu)
		k := replicaKey{"job-1", 0}
		vm := &qemu.VM{}
		r := &replica{key: k, gen: 1, vm: vm, state: cosmic.StateStarting, step: "boot"}
		if ready {
			r.state, r.step, r.ready = cosmic.StateRunning, "agent_connected", true
		}
		w.replicas[k] = r
		done := make(chan struct{})
		close(done) // the VM has ended: what it wrote is read, then the follower returns
		w.followConsole(k, 1, vm, done, dir)
		w.mu.Lock()
		defer w.mu.Unlock()
		return sink.recs, w.reportLocked(r)
	}
	type rec struct{ Step, Line string }
	want := []rec{
		{"bootloader", "serial console: the bootloader boots Debian GNU/Linux 12 (CosmicAC disk-bios)"},
		{"kernel", "serial console: the kernel started: Linux 6.1.0-57-cloud-amd64"},
		{"systemd", "serial console: systemd 252.39-1~deb12u2 started"},
		{"cloud_init", "serial console: cloud-init 22.4.2 runs its init-local stage"},
		{"cloud_init", "serial console: cloud-init 22.4.2 runs its init stage"},
		{"cloud_init", "serial console: cloud-init 22.4.2 runs its modules:config stage"},
		{"cloud_init", "serial console: cloud-init 22.4.2 runs its modules:final stage"},
		{"agent_started", "serial console: the agent's service started in the VM (cosmicac-agent.service); it connects next"},
		{"cloud_init_done", "serial console: cloud-init 22.4.2 finished, 215.52 s after the guest's start"},
	}
	lines := func(recs []joblog.Record) []rec {
		var out []rec
		for _, r := range recs {
			if r.JobID != "job-1" || r.Source != joblog.SourceSystem || r.OK == nil || !*r.OK {
				t.Errorf("record %+v: want job-1's, system, ok", r)
			}
			out = append(out, rec{r.Step, r.Line})
		}
		return out
	}

	t.Run("booting", func(t *testing.T) {
		recs, rep := run(t, false)
		if diff := cmp.Diff(want, lines(recs)); diff != "" {
			t.Errorf("records (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(&cosmic.Progress{Step: "cloud_init_done", Percent: 90}, rep.Progress); diff != "" {
			t.Errorf("progress (-want +got):\n%s", diff)
		}
	})
	t.Run("the agent connected first", func(t *testing.T) {
		recs, _ := run(t, true)
		if diff := cmp.Diff(want, lines(recs)); diff != "" {
			t.Errorf("records (-want +got):\n%s", diff)
		}
	})
	t.Run("the steps' progress only grows", func(t *testing.T) {
		last := -1
		for _, r := range want {
			if p := stepPercent[r.Step]; p < last || p <= stepPercent["boot"] || p >= stepPercent["agent_connected"] {
				t.Errorf("step %s at %d%%: want between boot and agent_connected, not before %d%%", r.Step, p, last)
			}
			last = stepPercent[r.Step]
		}
	})
}

// TestFollowConsoleBounded: the guest's root can print anything on its
// console; a boot's console writes each milestone once and at most
// maxMilestones records, and another boot of the replica (a restart)
// stops the old boot's follower.
func TestFollowConsoleBounded(t *testing.T) {
	var b strings.Builder
	for i := range 3 * maxMilestones {
		b.WriteString("[FAILED] Failed to start unit-" + strings.Repeat("x", i) + ".service.\n")
		b.WriteString("Linux version 6.1.0\n")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, qemu.ConsoleFile), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	sink := &recordSink{}
	w := &Worker{opts: Options{Logs: sink}, replicas: map[replicaKey]*replica{}}
	w.queue = worker.NewReportQueue(&w.mu)
	k := replicaKey{"job-1", 0}
	vm := &qemu.VM{}
	w.replicas[k] = &replica{key: k, gen: 1, vm: vm, state: cosmic.StateStarting, step: "boot"}
	done := make(chan struct{})
	close(done)
	w.followConsole(k, 1, vm, done, dir)
	kernel := 0
	for _, r := range sink.recs {
		if r.Step == "kernel" {
			kernel++
		}
	}
	if len(sink.recs) != maxMilestones || kernel != 1 {
		t.Errorf("%d records, %d of the kernel; want %d, the kernel's once", len(sink.recs), kernel, maxMilestones)
	}

	sink.recs = nil
	w.replicas[k].gen = 2 // restarted
	w.followConsole(k, 1, vm, done, dir)
	if len(sink.recs) != 0 {
		t.Errorf("the old boot's follower wrote %d records after a restart", len(sink.recs))
	}
}
