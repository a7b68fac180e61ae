package vms

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/cosmictest"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/qemu"
	"github.com/cosmicac/cosmicac/internal/qemuworker"
	"github.com/cosmicac/cosmicac/internal/testenv"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// vmImage is the base image hack/vm-image.sh built ($COSMICAC_VM_IMAGE,
// else the script's cache directory), with its image.json; a test that
// needs it fails under CI (hack/test.sh builds it) and skips elsewhere.
func vmImage(t *testing.T) (qemu.Image, string) {
	t.Helper()
	for _, tool := range []string{"qemu-system-x86_64", "qemu-img", "genisoimage"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(t, "%s is not installed (hack/install-deps.sh installs it)", tool)
		}
	}
	dir := os.Getenv("COSMICAC_VM_IMAGE")
	if dir == "" {
		root, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(filepath.Join(filepath.Dir(strings.TrimSpace(string(root))), "hack", "vm-image.sh"), "--print-dest").Output()
		if err != nil {
			t.Fatalf("hack/vm-image.sh --print-dest: %v", err)
		}
		dir = strings.TrimSpace(string(out))
	}
	b, err := os.ReadFile(filepath.Join(dir, qemu.ImageFile))
	if err != nil {
		missing(t, "no VM image in %s: build it with hack/vm-image.sh (%v)", dir, err)
	}
	var desc struct {
		KernelVersion string `json:"kernelVersion"`
	}
	json.Unmarshal(b, &desc) //nolint:errcheck // LoadImage says what is wrong
	im, err := qemu.LoadImage(t.Context(), "debian-12", dir)
	if err != nil {
		t.Fatal(err)
	}
	return im, desc.KernelVersion
}

func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	testenv.Require(t, false, format, args...)
}

// consolesOnFailure logs the end of every VM's serial console under dir
// when t fails: what the guest said (a unit that failed, the agent's
// error) is the first thing to read, and the directory is gone after.
func consolesOnFailure(t *testing.T, dir string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		logs, _ := filepath.Glob(filepath.Join(dir, "*", qemu.ConsoleFile))
		for _, l := range logs {
			b, err := os.ReadFile(l)
			if err != nil {
				continue
			}
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("the end of %s:\n%s", l, b)
		}
	})
}

// staticAgent is cosmicac-agent built with CGO_ENABLED=0, the agent the VMs
// run (or COSMICAC_AGENT_BINARY): built once for the test binary, in
// agentDir (which TestMain removes), and shared by the tests that boot VMs.
func staticAgent(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("COSMICAC_AGENT_BINARY"); p != "" {
		return p
	}
	return built(t, "cosmicac-agent")
}

// relayCommand is `cosmicac qemu-relay` as `up --rack qemu` runs it, with
// this checkout's cosmicac (built once, beside the agent): the host-side
// process of a guest's connection to a forwarded port. The agent binary
// has no such command: it runs in the VM.
func relayCommand(t *testing.T) []string {
	t.Helper()
	return []string{built(t, "cosmicac"), "qemu-relay"}
}

// built builds ./cmd/NAME, static, into agentDir once for the test binary.
func built(t *testing.T, name string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := builtBins[name]; ok {
		return p
	}
	if agentDir == "" {
		dir, err := os.MkdirTemp("", "cosmicac-agent-")
		if err != nil {
			t.Fatal(err)
		}
		agentDir = dir
	}
	bin := filepath.Join(agentDir, name)
	cmd := exec.Command("go", "build", "-o", bin, "github.com/cosmicac/cosmicac/cmd/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v: %s", name, err, out)
	}
	builtBins[name] = bin
	return bin
}

var (
	buildMu   sync.Mutex
	agentDir  string                // removed by TestMain
	builtBins = map[string]string{} // by command name
)

// vmHeartbeat gives the ork a heartbeat of a second, not the 50 ms of
// internal/cosmictest's platforms: the QEMU worker pushes every change as
// it happens, the heartbeat only repairs what a push missed, and over
// minutes of boots twenty heartbeats a second (each every job's report
// applied, every active job read for its deadlines) were a fifth of the
// race-built test binary's CPU.
func vmHeartbeat(c *platform.Config) { c.Ork.Heartbeat = config.Duration(time.Second) }

// vmEnvBound bounds a VM test's platform only where the test binary has no
// deadline of its own (go test -timeout 0).
const vmEnvBound = 30 * time.Minute

// qemuPlatform starts a platform whose rack is a QEMU rack of one node
// with gpus GPUs, booting one VM at a time, with image im as name; its VMs
// live in the directory it answers, whose consoles are logged if t fails.
// Its bound is the test binary's (cosmictest's envContext); each wait for
// a boot has its own.
func qemuPlatform(t *testing.T, name string, im qemu.Image, gpus int, opts ...cosmictest.Option) (*cosmictest.Env, string) {
	t.Helper()
	agentBin := staticAgent(t)
	vms := t.TempDir()
	consolesOnFailure(t, vms)
	e := cosmictest.NewEnvWithin(t, vmEnvBound, append([]cosmictest.Option{vmHeartbeat, func(c *platform.Config) {
		c.QEMU = &platform.QEMUConfig{
			Rack: qemuworker.Config{Rack: "qemu-1", Location: "local", GPUModel: "VIRTUAL_GPU", Nodes: 1, GPUsPerNode: gpus, Dir: vms, MaxBoots: 1,
				StopVMsOnExit: true}, // the test's end ends its VMs, however it ends
			Images: qemu.Catalogue{name: im}, AgentBinary: agentBin, Relay: relayCommand(t),
		}
	}}, opts...)...)
	return e, vms
}

// TestQEMURackEndToEnd: a GPU Container Job on the QEMU rack boots the
// Debian base image (no CosmicAC in it) in a real VM: the job is running
// because the agent, delivered on its read-only disk, connected; the shell
// is in the VM (the guest's kernel, not the host's); ssh reaches the VM's
// own sshd with the spec's key; the log shows the boot steps (the
// worker's, the serial console's, the agent's); the job's volumes are real
// files in the VM (vmData: a datastore's objects, a Git repository, an RW
// volume pushed by datasync while it runs and by the agent at the kill,
// through the rack's egress proxy alone); a file survives a restart, and
// the RW volume is kept as the job left it, not copied in again; delete
// removes the disk; a job's command's exit code is reported. Under TCG
// each boot takes about a minute.
func TestQEMURackEndToEnd(t *testing.T) { // not parallel: it sets the environment
	needAMD64Host(t)
	im, guestKernel := vmImage(t)
	testenv.RequireCommands(t, "apt-get install openssh-client", "ssh", "ssh-keygen")
	data := newVMData(t)
	e, vms := qemuPlatform(t, "debian-12", im, 2, data.egress)
	e.AddDatastore(data.srv, "main")
	key := filepath.Join(t.TempDir(), "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	pub, _ := os.ReadFile(key + ".pub")
	start := time.Now()
	j := e.Create(cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: "vm", Location: "local", Image: "debian-12",
		Resources: cosmic.Resources{GPU: 1}, SSHPublicKeys: []string{strings.TrimSpace(string(pub))}, Volumes: data.volumes()})
	e.WaitStateWithin(j.ID, 8*time.Minute, cosmic.StateRunning)
	t.Logf("create → running: %v", time.Since(start).Round(time.Second))

	env, shell := jobShell(t, e, j.ID)
	host, _ := exec.Command("uname", "-r").Output()
	if got := shell("uname -r"); got != guestKernel || got == strings.TrimSpace(string(host)) {
		t.Errorf("uname -r in the job's shell = %q; want the guest's %q, not the host's %q", got, guestKernel, strings.TrimSpace(string(host)))
	}
	shell("echo kept > /root/kept && sync")

	// ssh, through the platform, to the VM's own sshd, as the image's
	// default user with the spec's key.
	for k, v := range env {
		t.Setenv(k, v)
	}
	t.Setenv("COSMICAC_TEST_MAIN", "1")
	sshOpts := []string{"-F", "/dev/null", "-i", key, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "ConnectTimeout=60"}
	code, out, errs := runCLI(t, env, append(append([]string{"jobs", "ssh", j.ID, "-l", "debian", "--"}, sshOpts...), "cat", "/etc/hostname")...)
	if code != 0 || strings.TrimSpace(out) != "vm-0" {
		t.Errorf("jobs ssh … cat /etc/hostname: exit %d, %q, %q; want the VM's hostname vm-0", code, out, errs)
	}

	// Root in the VM opens 200 connections to a platform port: the VM's
	// cap (64, the agent's own connections among them) are relayed, the
	// rest reset at once, and no process per connection is left.
	guestConnections(t, shell, vms, e.P.DirectoryNode.Addr())

	// The log has the boot's steps, from the worker and from the agent,
	// and says connections were refused.
	steps := map[string]bool{}
	refusedRecord := false
	err := e.Client.JobLogs(e.Ctx, j.ID, client.LogOptions{}, func(ev client.LogEvent) error {
		if ev.Record != nil && ev.Record.Step != "" {
			steps[ev.Record.Step] = true
		}
		if ev.Record != nil && strings.Contains(ev.Record.Line, "connections open to the platform's ports, its cap") {
			refusedRecord = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"prepare_disk", "write_seed", "boot", "kernel", "systemd", "cloud_init", "agent_started", "agent_connected"} {
		if !steps[s] {
			t.Errorf("the job's log lacks step %s (has %v)", s, steps)
		}
	}
	if !refusedRecord {
		t.Error("the job's log does not say the VM's connections over its cap were refused")
	}
	data.checkRunning(t, e, j.ID, shell)

	// Restart keeps the disk.
	if _, err := e.Client.RestartJob(e.Ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	e.WaitStateWithin(j.ID, 2*time.Minute, cosmic.StateRestarting, cosmic.StateStarting)
	e.WaitStateWithin(j.ID, 8*time.Minute, cosmic.StateRunning)
	if got := shell("cat /root/kept"); got != "kept" {
		t.Errorf("after restart /root/kept = %q, want kept", got)
	}
	if got := shell("cat /workspace/out/ckpt-1.txt"); got != "checkpoint" {
		t.Errorf("after restart the RW volume's file = %q, want checkpoint", got)
	}
	if lines := jobLines(t, e, j.ID, "kept as the job left it", time.Minute); !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "kept as the job left it") }) {
		t.Error("the job's log does not say the restarted replica kept its RW volume")
	}
	data.checkStandaloneKept(t, e, j.ID, shell)
	dir := filepath.Join(vms, j.ID+"-r0")
	if _, err := os.Stat(filepath.Join(dir, qemu.OverlayFile)); err != nil {
		t.Fatalf("the replica's disk: %v", err)
	}
	data.checkPushAtKill(t, e, j.ID, shell)
	if _, err := e.Client.DeleteJob(e.Ctx, j.ID, true); err != nil {
		t.Fatal(err)
	}
	e.WaitGone(j.ID)
	// A stopped job's record goes at once; its worker removes the disk
	// in the background.
	waittest.NoErrorWithin(t, time.Minute, func() error {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			return fmt.Errorf("the VM's directory is still there: %v", err)
		}
		return nil
	}, "the deleted job's VM directory to go")
	data.checkStandaloneOutlives(t, e, vms, j.Team)
	// A job's command and its exit code: TestQEMURackFromDisk (its job has
	// one, which saves a boot of minutes under TCG).
	fmt.Fprintln(os.Stderr) // keep the VM boot logs apart in -v output
}

// guestConnections opens 200 connections from the guest to 10.0.2.100:7001
// (the directory's port, whose TLS waits 10 s for the client's hello) and
// holds them a second, while the host samples the relay processes of the
// VMs in vms (their arguments name vms or host, the forward's host
// address): at most 64 stay open, the others are reset (or refused at
// connect, when the reset comes first), and the relays' memory at its
// peak stays under 64 MiB of their own and 512 MiB resident (one
// `cosmicac qemu-relay` runs for about 10 ms with 1 MiB of its own and
// 14 MiB of the binary resident; before it handed its connection to the
// worker, it kept it for the connection's life with 28 and 58).
func guestConnections(t *testing.T, shell func(string) string, vms, host string) {
	t.Helper()
	const script = `fds=(); for i in $(seq 200); do exec {fd}<>/dev/tcp/10.0.2.100/7001 2>/dev/null && fds+=($fd); done; s=$SECONDS; sleep 1; ` +
		`alive=0; ended=0; for fd in "${fds[@]}"; do if read -t 0 -u $fd; then ended=$((ended+1)); else alive=$((alive+1)); fi; done; ` +
		`echo "open=${#fds[@]} alive=$alive ended=$ended (opened in ${s}s)"`
	stop := make(chan struct{})
	var peak relayUse
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			u := relayProcesses(vms, host)
			peak.n, peak.rss, peak.anon = max(peak.n, u.n), max(peak.rss, u.rss), max(peak.anon, u.anon)
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	start := time.Now()
	out := shell("bash -c '" + strings.ReplaceAll(script, "'", `'\''`) + "'")
	close(stop)
	wg.Wait()
	var open, alive, ended int
	if _, err := fmt.Sscanf(out, "open=%d alive=%d ended=%d", &open, &alive, &ended); err != nil {
		t.Fatalf("the guest's connections: %q: %v", out, err)
	}
	t.Logf("200 guest connections in %v: %s; relay processes at their peak: %d, RSS %d MiB, anonymous %d MiB",
		time.Since(start).Round(time.Second), out, peak.n, peak.rss>>20, peak.anon>>20)
	// One reset before libslirp answered the guest's SYN fails its connect.
	if alive > 64 || ended != open-alive {
		t.Errorf("the guest's 200 connections: %s; want at most 64 relayed (the agent's own count), the rest reset or refused", out)
	}
	if peak.anon > 64<<20 || peak.rss > 512<<20 {
		t.Errorf("the relay processes for 200 guest connections had %d MiB of their own, %d MiB resident, at their peak (%d processes); want at most 64 and 512",
			peak.anon>>20, peak.rss>>20, peak.n)
	}
}

type relayUse struct {
	n         int
	rss, anon int64
}

// relayProcesses sums the memory of the host's `cosmicac qemu-relay …`
// processes whose arguments name one of subs.
func relayProcesses(subs ...string) relayUse {
	var u relayUse
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		argv := strings.Split(string(b), "\x00")
		if err != nil || len(argv) < 3 || argv[1] != "qemu-relay" || !slices.ContainsFunc(subs, func(s string) bool { return strings.Contains(string(b), s) }) {
			continue // not a relay (QEMU's own command line names them too)
		}
		status, err := os.ReadFile(filepath.Join(filepath.Dir(p), "status"))
		if err != nil {
			continue
		}
		u.n++
		for _, l := range strings.Split(string(status), "\n") {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			kib, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "VmRSS:":
				u.rss += kib << 10
			case "RssAnon:":
				u.anon += kib << 10
			}
		}
	}
	return u
}

// vmBootDisk is the base image's disk that boots itself (image.json's
// bootDisk, disk-bios.qcow2: an MBR disk with GRUB for BIOS, shaped like
// a stock cloud image), loaded as a user's own image is: the file alone,
// no image.json, no kernel. It fails under CI and skips elsewhere when
// the image predates it.
func vmBootDisk(t *testing.T) (qemu.Image, string) {
	t.Helper()
	base, guestKernel := vmImage(t)
	dir := filepath.Dir(base.Disk)
	b, err := os.ReadFile(filepath.Join(dir, qemu.ImageFile))
	if err != nil {
		t.Fatal(err)
	}
	var desc struct {
		BootDisk struct {
			Disk string `json:"disk"`
		} `json:"bootDisk"`
	}
	if err := json.Unmarshal(b, &desc); err != nil {
		t.Fatal(err)
	}
	if desc.BootDisk.Disk == "" {
		missing(t, "the VM image in %s has no bootDisk: rebuild it with hack/vm-image.sh", dir)
	}
	im, err := qemu.LoadImage(t.Context(), "stock", filepath.Join(dir, desc.BootDisk.Disk))
	if err != nil {
		t.Fatal(err)
	}
	if im.Kernel != "" || im.Format != "qcow2" {
		t.Fatalf("LoadImage(%s) = %+v; want a qcow2 with no kernel", desc.BootDisk.Disk, im)
	}
	return im, guestKernel
}

// TestQEMURackFromDisk: a job's image given as a plain disk file with its
// own partition table and bootloader (as a user's stock cloud image is,
// --image NAME=PATH) boots from disk, with no -kernel: SeaBIOS, then GRUB
// from the MBR, then the kernel from partition 1. The job is running
// because the agent connected, and the guest's command line is GRUB's
// (BOOT_IMAGE=…, root=LABEL=…), not the rack's direct-boot one. Under TCG
// the boot takes about a minute; `jobs create --wait` shows its stages as
// the serial console tells them (before, nothing for ~95 s after "boot"),
// and the job's log has them all, in order.
func TestQEMURackFromDisk(t *testing.T) {
	t.Parallel() // minutes of emulated boots: beside the others
	needAMD64Host(t)
	im, guestKernel := vmBootDisk(t)
	e, vms := qemuPlatform(t, "stock", im, 1)
	tok, err := e.P.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COSMICAC_URL": e.P.URL, "COSMICAC_TOKEN": tok, "HOME": t.TempDir()}
	start := time.Now()
	// The job's command waits for a file the test makes below, then
	// exits 5 where the agent disk is mounted: the command runs in the VM,
	// and its exit code is reported.
	const goFile = "/run/cosmicac-test-go"
	// A bound on a failure only: beside the other VM tests' boots and the
	// rest of CI on 2 cores, this boot has taken over 8 minutes (the
	// guest's networking.service alone waited 2), where alone it takes 75 s.
	id, waited := createAndWait(t, env, 20*time.Minute, "--name", "stock", "--location", "local", "--image", "stock", "--gpus", "1",
		"--", "sh", "-c", "while [ ! -e "+goFile+" ]; do sleep 1; done; test -d /run/cosmicac && exit 5")
	t.Logf("create → running, from disk: %v; jobs create --wait said:\n%s", time.Since(start).Round(time.Second), waited)
	j := e.WaitStateWithin(id, time.Minute, cosmic.StateRunning)
	// --wait prints each change of the status line it sees: the console's
	// steps come between the worker's boot and running. It asks every
	// 500 ms, so a step shorter than that may pass unseen (the worker's
	// "boot" lasts until SeaBIOS's first line, often less): what it prints
	// is in the boot's order, and the console's long steps are among it.
	order := []string{"prepare_disk", "write_seed", "boot", "bootloader", "kernel", "systemd", "cloud_init", "agent_started"}
	console := map[string]bool{"bootloader": true, "kernel": true, "systemd": true, "cloud_init": true}
	var printed []string
	seen := 0
	for _, line := range strings.Split(waited, "\n") {
		_, st, ok := strings.Cut(line, "] starting: ")
		if !ok {
			continue
		}
		step, _, _ := strings.Cut(st, " ")
		if len(printed) == 0 || printed[len(printed)-1] != step {
			printed = append(printed, step)
		}
		if console[step] {
			seen++
		}
	}
	if !isSubsequence(printed, order) || seen < 2 || !strings.HasSuffix(strings.TrimSpace(waited), "] running") {
		t.Errorf("jobs create --wait printed the steps %v; want some of %v in that order, two or more of them the console's (bootloader, kernel, systemd, cloud_init), then running:\n%s", printed, order, waited)
	}
	shell := func(cmd string) string {
		t.Helper()
		code, out, errs := runCLI(t, env, "jobs", "shell", j.ID, "-T", "--", "sh", "-c", cmd)
		if code != 0 {
			t.Fatalf("jobs shell -- %s: exit %d: %s %s", cmd, code, out, errs)
		}
		return strings.TrimSpace(out)
	}
	cmdline := shell("cat /proc/cmdline")
	if !strings.HasPrefix(cmdline, "BOOT_IMAGE=/boot/vmlinuz-") || !strings.Contains(cmdline, "root=LABEL=cosmicac-root") {
		t.Errorf("/proc/cmdline = %q; want GRUB's (BOOT_IMAGE=/boot/vmlinuz-… root=LABEL=cosmicac-root …)", cmdline)
	}
	if got := shell("uname -r"); got != guestKernel {
		t.Errorf("uname -r = %q; want the image's %q", got, guestKernel)
	}
	if got := shell("findmnt -n -o SOURCE /"); got != "/dev/vda1" {
		t.Errorf("the root filesystem is %q; want partition 1 of the first disk, /dev/vda1", got)
	}
	// GRUB's grub.cfg echoes to the serial console, which the rack logs.
	serial, err := os.ReadFile(filepath.Join(vms, j.ID+"-r0", qemu.ConsoleFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(serial), "Loading Linux") {
		t.Errorf("the serial console lacks GRUB's \"Loading Linux\"")
	}
	// The job's log has each step of the boot, first seen in this order.
	// The agent starts once cloud-init's init stage has ended (after the
	// first cloud_init records), so its later stages may come before or
	// after agent_started; cloud-init finishes after the agent started,
	// perhaps after it connected.
	want := []string{"prepare_disk", "write_seed", "boot", "bootloader", "kernel", "systemd", "cloud_init", "agent_started", "cloud_init_done"}
	var steps []string
	waittest.Within(t, 3*time.Minute, func() bool {
		steps = nil
		err := e.Client.JobLogs(e.Ctx, j.ID, client.LogOptions{Source: joblog.SourceSystem}, func(ev client.LogEvent) error {
			if r := ev.Record; r != nil && r.Stream == "wrk-server-qemu" && r.Step != "" && r.Step != "agent_connected" && !slices.Contains(steps, r.Step) {
				steps = append(steps, r.Step)
			}
			return nil
		})
		return err == nil && slices.Equal(steps, want)
	}, "the job's log to have the boot's steps %v (has %v)", want, &steps)
	shell("touch " + goFile)
	got := e.WaitStateWithin(j.ID, 3*time.Minute, cosmic.StateFailed, cosmic.StateStopped)
	if got.Status.ExitCode == nil || *got.Status.ExitCode != 5 {
		b, _ := json.Marshal(got.Status)
		t.Errorf("the command's job: %s; want failed with exit code 5", b)
	}
	if _, err := e.Client.DeleteJob(e.Ctx, j.ID, true); err != nil {
		t.Fatal(err)
	}
	e.WaitGone(j.ID)
	waitNoQEMU(t, vms)
	fmt.Fprintln(os.Stderr)
}

// TestQEMURackAgentDeadline: an image with no cloud-init (here a blank
// disk, which does not even boot) never gets its agent: the replica fails
// with agent_timeout naming the last step it reached, and its VM is stopped.
func TestQEMURackAgentDeadline(t *testing.T) {
	for _, tool := range []string{"qemu-system-x86_64", "qemu-img", "genisoimage"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(t, "%s is not installed (hack/install-deps.sh installs it)", tool)
		}
	}
	blank := filepath.Join(t.TempDir(), "blank.raw")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "raw", blank, "64M").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	im, err := qemu.LoadImage(t.Context(), "blank", blank)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	vms := t.TempDir()
	consolesOnFailure(t, vms)
	e := cosmictest.NewEnvWithin(t, vmEnvBound, vmHeartbeat, func(c *platform.Config) {
		c.QEMU = &platform.QEMUConfig{
			Rack: qemuworker.Config{Rack: "qemu-1", Location: "local", GPUModel: "VIRTUAL_GPU", Nodes: 1, GPUsPerNode: 2, Dir: vms,
				AgentDeadline: config.Duration(15 * time.Second), StopGrace: config.Duration(time.Second), StopVMsOnExit: true},
			Images: qemu.Catalogue{"blank": im}, AgentBinary: self, Relay: []string{self, "qemu-relay"},
		}
	})
	// racks list says the rack's GPUs are for placement only.
	tok, err := e.P.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COSMICAC_URL": e.P.URL, "COSMICAC_TOKEN": tok, "HOME": t.TempDir()}
	waittest.Within(t, 30*time.Second, func() bool {
		_, out, _ := runCLI(t, env, "racks", "list")
		return strings.Contains(out, "rack qemu-1: real VMs under QEMU") && strings.Contains(out, "placement only")
	}, "racks list to say the QEMU rack's GPUs are for placement only")
	j := e.Create(cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: "no-cloud-init", Location: "local", Image: "blank", Resources: cosmic.Resources{GPU: 1}})
	got := e.WaitStateWithin(j.ID, 2*time.Minute, cosmic.StateFailed)
	// The step named is the last the replica reached: "boot" when the
	// host had the disks ready within the deadline, "prepare_disk" on a
	// host too loaded to (both seen; the deadline counts from the start).
	if r := got.Status.Reason; r == nil || r.Code != cosmic.ReasonAgentTimeout || !strings.Contains(r.Message, `the last step reached was "`) {
		t.Errorf("reason %+v; want agent_timeout naming the last step reached", r)
	}
	waitNoQEMU(t, vms)
}

// createAndWait runs `jobs create ARGS… --wait -q` as a user would, for
// up to d, and returns the job's ID and what --wait printed on stderr; a
// job that does not run fails the test.
func createAndWait(t *testing.T, env map[string]string, d time.Duration, args ...string) (string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	a := &cli.App{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	if code := a.Run(ctx, append([]string{"jobs", "create", "--wait", "-q"}, args...)); code != 0 {
		t.Fatalf("jobs create %s --wait: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	return strings.TrimSpace(out.String()), errb.String()
}

// isSubsequence reports whether every element of sub appears in seq, in
// seq's order, each at most once.
func isSubsequence(sub, seq []string) bool {
	i := 0
	for _, s := range sub {
		for i < len(seq) && seq[i] != s {
			i++
		}
		if i == len(seq) {
			return false
		}
		i++
	}
	return true
}

// waitNoQEMU waits until no QEMU runs a VM of dir.
func waitNoQEMU(t *testing.T, dir string) {
	t.Helper()
	var out []byte
	if !waittest.Poll(30*time.Second, func() bool {
		out, _ = exec.Command("pgrep", "-f", "qemu-system-x86_64 .*"+dir).Output()
		return len(strings.TrimSpace(string(out))) == 0
	}) {
		t.Fatalf("a VM of %s still runs: pids %s", dir, out)
	}
}

// jobShell is the admin's CLI environment on e and a function that runs
// sh -c CMD in the job's VM with `cosmicac jobs shell` and answers its
// output, trimmed; a command that does not exit 0 fails the test.
func jobShell(t *testing.T, e *cosmictest.Env, jobID string) (map[string]string, func(cmd string) string) {
	t.Helper()
	tok, err := e.P.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COSMICAC_URL": e.P.URL, "COSMICAC_TOKEN": tok, "HOME": t.TempDir()}
	return env, func(cmd string) string {
		t.Helper()
		code, out, errs := runCLI(t, env, "jobs", "shell", jobID, "-T", "--", "sh", "-c", cmd)
		if code != 0 {
			t.Fatalf("jobs shell -- %s: exit %d: %s %s", cmd, code, out, errs)
		}
		return strings.TrimSpace(out)
	}
}
