package qemu_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/qemu"
	"github.com/cosmicac/cosmicac/internal/testenv"
)

// TestArgs: the command line gives the guest only what the config names:
// restrict=on user networking with the forwards and the SSH port on
// loopback, the overlay, the seed and the agent disk read-only, direct
// kernel boot when the image has a kernel, TCG's cache size.
func TestArgs(t *testing.T) {
	c := qemu.Config{Dir: "/vms/j1-r0", CPUs: 2, MemoryMiB: 1024, AgentDisk: "/cache/agent.iso", SSHPort: 2222, Relay: []string{"/bin/cosmicac", "qemu-relay"},
		Forwards: []qemu.Forward{{GuestAddr: "10.0.2.100:7001", HostAddr: "127.0.0.1:7001"}},
		Image:    qemu.Image{Disk: "/img/disk.qcow2", Format: "qcow2", Kernel: "/img/vmlinuz", Initrd: "/img/initrd.img", Cmdline: "root=LABEL=root console=ttyS0"},
		Volumes: []qemu.Volume{{Path: "/vms/.volumes/t/scratch.qcow2", Serial: "cosmicac-vol0"},
			{Path: "/vms/.volumes/t/ref,data.qcow2", Serial: "cosmicac-vol1", ReadOnly: true}}}
	line := strings.Join(c.Args(), " ")
	for _, want := range []string{
		"-accel tcg,tb-size=128", "-cpu max", "-smp 2", "-m 1024",
		"-netdev user,id=n0,restrict=on,guestfwd=tcp:10.0.2.100:7001-cmd:/bin/cosmicac qemu-relay /vms/j1-r0/relay.sock 10.0.2.100:7001,hostfwd=tcp:127.0.0.1:2222-:22",
		"file=/vms/j1-r0/disk.qcow2,if=virtio,format=qcow2",
		"file=/vms/j1-r0/seed.iso,if=virtio,format=raw,readonly=on",
		"file=/cache/agent.iso,if=virtio,format=raw,readonly=on",
		"-kernel /img/vmlinuz -append root=LABEL=root console=ttyS0 -initrd /img/initrd.img",
		"-serial file:/vms/j1-r0/console.log",
		"-drive file=/vms/.volumes/t/scratch.qcow2,if=none,id=vol0,format=qcow2,discard=unmap -device virtio-blk-pci,drive=vol0,serial=cosmicac-vol0,addr=0x10.0,multifunction=on",
		"-drive file=/vms/.volumes/t/ref,,data.qcow2,if=none,id=vol1,format=qcow2,discard=unmap,readonly=on -device virtio-blk-pci,drive=vol1,serial=cosmicac-vol1,addr=0x10.1",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("args lack %q:\n%s", want, line)
		}
	}
	c.Dir, c.Relay = "/vms/it's, here", []string{"/opt/cosmic ac/cosmicac", "qemu-relay"}
	if line := strings.Join(c.Args(), " "); !strings.Contains(line, `-cmd:'/opt/cosmic ac/cosmicac' qemu-relay '/vms/it'\''s,, here/relay.sock' 10.0.2.100:7001,`) {
		t.Errorf("the relay's arguments are not quoted for g_shell_parse_argv and QEMU's commas:\n%s", line)
	}
	c.Accel, c.Image.Kernel, c.SSHPort, c.VFIO = "kvm", "", 0, []string{"0000:41:00.0"}
	args := c.Args()
	line = strings.Join(args, " ")
	if !strings.Contains(line, "-accel kvm -cpu host") || strings.Contains(line, "-kernel") || strings.Contains(line, "hostfwd") ||
		!slices.Contains(args, "vfio-pci,host=0000:41:00.0") {
		t.Errorf("kvm, disk boot, no ssh, one GPU:\n%s", line)
	}
}

func need(t *testing.T, tools ...string) {
	t.Helper()
	testenv.RequireCommands(t, "hack/install-deps.sh installs it", tools...)
}

// TestPrepareKeepsTheDisk: Prepare makes an overlay on the base image and
// a seed; a second Prepare (a restart) keeps the overlay's contents and
// writes the seed anew; LoadImage reads a file or an image.json directory.
func TestPrepareKeepsTheDisk(t *testing.T) {
	need(t, "qemu-img", "genisoimage")
	ctx := context.Background()
	dir := t.TempDir()
	base := filepath.Join(dir, "base.raw")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "raw", base, "16M").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	im, err := qemu.LoadImage(ctx, "tiny", base)
	if err != nil || im.Format != "raw" || im.Disk != base {
		t.Fatalf("LoadImage(file) = %+v, %v", im, err)
	}
	os.WriteFile(filepath.Join(dir, qemu.ImageFile), []byte(`{"disk":"base.raw","kernel":"vmlinuz","kernelCmdline":"root=/dev/vda"}`), 0o600)
	im2, err := qemu.LoadImage(ctx, "deb", dir)
	if err != nil || im2.Disk != base || im2.Kernel != filepath.Join(dir, "vmlinuz") || im2.Format != "raw" || im2.Name != "deb" {
		t.Fatalf("LoadImage(dir) = %+v, %v", im2, err)
	}
	if _, err := (qemu.Catalogue{"deb": im2}).Lookup("ubuntu-24.04"); err == nil || !strings.Contains(err.Error(), "it has: deb") {
		t.Errorf("Lookup of a missing image: %v", err)
	}
	c := qemu.Config{Dir: filepath.Join(dir, "vm"), Image: im, DiskGiB: 1, UserData: []byte("#cloud-config\n"), MetaData: []byte("instance-id: a\n")}
	created, err := qemu.Prepare(ctx, c)
	if err != nil || !created {
		t.Fatalf("Prepare: %v, %v", created, err)
	}
	overlay := filepath.Join(c.Dir, qemu.OverlayFile)
	if out, err := exec.Command("qemu-io", "-c", "write -P 0x5a 0 4k", overlay).CombinedOutput(); err != nil {
		t.Logf("qemu-io: %v %s (the contents check is skipped)", err, out)
	}
	before, _ := os.ReadFile(overlay)
	c.MetaData = []byte("instance-id: b\n")
	if created, err := qemu.Prepare(ctx, c); err != nil || created {
		t.Fatalf("second Prepare: %v, %v", created, err)
	}
	if after, _ := os.ReadFile(overlay); string(after) != string(before) {
		t.Error("a second Prepare changed the disk")
	}
	seed, err := os.ReadFile(filepath.Join(c.Dir, qemu.SeedFile))
	if err != nil || !strings.Contains(string(seed), "cidata") || !strings.Contains(string(seed), "instance-id: b") {
		t.Errorf("the seed is not the new cidata ISO (%v)", err)
	}
	bin := filepath.Join(dir, "agent")
	os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755)
	iso, err := qemu.AgentDiskFor(ctx, filepath.Join(dir, "cache"), bin)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := qemu.AgentDiskFor(ctx, filepath.Join(dir, "cache"), bin); err != nil || again != iso {
		t.Errorf("AgentDiskFor twice: %s, %v; want %s", again, err, iso)
	}
	if b, _ := os.ReadFile(iso); !strings.Contains(string(b), qemu.AgentDiskLabel) {
		t.Error("the agent disk has no COSMICAC label")
	}
	if err := qemu.Remove(c.Dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(overlay); !os.IsNotExist(err) {
		t.Errorf("Remove left the disk: %v", err)
	}
}

// TestCheckForwards: guest addresses are IPv4:port, none twice, and no
// two at one address whose ports are each other's bytes swapped (the pair
// libslirp 4.7 refuses).
func TestCheckForwards(t *testing.T) {
	for _, tc := range []struct {
		guest []string
		ok    bool
	}{
		{nil, true},
		{[]string{"10.0.2.100:7001", "10.0.2.100:7002", "10.0.2.100:7003"}, true},
		{[]string{"10.0.2.100:6939"}, true}, // 0x1B1B: its own swap
		{[]string{"10.0.2.100:45016", "10.0.2.101:55471"}, true},
		{[]string{"10.0.2.100:45016", "10.0.2.100:55471"}, false},
		{[]string{"10.0.2.100:55471", "10.0.2.100:45016"}, false},
		{[]string{"10.0.2.100:7001", "10.0.2.100:7001"}, false},
		{[]string{"10.0.2.100"}, false},
		{[]string{"10.0.2.100:0"}, false},
		{[]string{"10.0.2.100:65536"}, false},
		{[]string{"[fd00::1]:7001"}, false},
		{[]string{"guest:7001"}, false},
	} {
		if err := qemu.CheckForwards(fwdAt(tc.guest...)); (err == nil) != tc.ok {
			t.Errorf("%v: err %v, want ok %v", tc.guest, err, tc.ok)
		}
	}
}

// TestCheckForwardsAgreesWithQEMU: the installed QEMU takes the forwards
// CheckForwards passes (the worker's 7001, 7002, … among them), and the
// swapped pair it refuses is one QEMU refuses too (or this libslirp has
// the fix, which the test says).
func TestCheckForwardsAgreesWithQEMU(t *testing.T) {
	need(t, "qemu-system-x86_64")
	try := func(guest ...string) error {
		c := qemu.Config{Dir: t.TempDir(), Relay: []string{"cat"}}
		for _, g := range guest {
			c.Forwards = append(c.Forwards, qemu.Forward{GuestAddr: g, HostAddr: "127.0.0.1:1"})
		}
		args := c.Args()
		i := slices.Index(args, "-netdev")
		cmd := exec.CommandContext(t.Context(), "qemu-system-x86_64", "-machine", "none", "-nodefaults", "-display", "none",
			"-monitor", "stdio", "-netdev", args[i+1])
		cmd.Stdin = strings.NewReader("quit\n")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	ok := []string{"10.0.2.100:7001", "10.0.2.100:7002", "10.0.2.100:7003", "10.0.2.100:7004", "10.0.2.100:7005"}
	if err := qemu.CheckForwards(fwdAt(ok...)); err != nil {
		t.Fatal(err)
	}
	if err := try(ok...); err != nil {
		t.Errorf("QEMU refuses forwards CheckForwards passes: %v", err)
	}
	swapped := []string{"10.0.2.100:45016", "10.0.2.100:55471"}
	if qemu.CheckForwards(fwdAt(swapped...)) == nil {
		t.Fatal("CheckForwards passes the swapped pair")
	}
	if err := try(swapped...); err == nil {
		t.Logf("this QEMU's libslirp takes %v: CheckForwards is stricter than it needs to be here", swapped)
	} else if !strings.Contains(err.Error(), "Conflicting/invalid host:port in guest forwarding rule") {
		t.Errorf("QEMU refuses %v for another reason: %v", swapped, err)
	}
}

func fwdAt(guest ...string) []qemu.Forward {
	var out []qemu.Forward
	for _, g := range guest {
		out = append(out, qemu.Forward{GuestAddr: g, HostAddr: "127.0.0.1:1"})
	}
	return out
}

// TestEngineDisk: the engine disk holds llama-server (executable) at its
// root and the model at models/ORG/NAME.gguf, under the label the guest
// mounts it by; it is built once per engine and model, and attached
// read-only.
func TestEngineDisk(t *testing.T) {
	need(t, "genisoimage", "isoinfo")
	ctx := context.Background()
	dir := t.TempDir()
	server, model := filepath.Join(dir, "llama-server"), filepath.Join(dir, "m.gguf")
	if err := os.WriteFile(server, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(model, []byte("GGUF model"), 0o644); err != nil {
		t.Fatal(err)
	}
	iso, err := qemu.EngineDiskFor(ctx, filepath.Join(dir, "cache"), server, qemu.EngineModel{Rel: "cosmicac/test-chat.gguf", Path: model})
	if err != nil {
		t.Fatal(err)
	}
	if again, err := qemu.EngineDiskFor(ctx, filepath.Join(dir, "cache"), server, qemu.EngineModel{Rel: "cosmicac/test-chat.gguf", Path: model}); err != nil || again != iso {
		t.Errorf("EngineDiskFor twice: %s, %v; want %s", again, err, iso)
	}
	if other, err := qemu.EngineDiskFor(ctx, filepath.Join(dir, "cache"), server, qemu.EngineModel{Rel: "cosmicac/other.gguf", Path: model}); err != nil || other == iso {
		t.Errorf("another model's disk: %s, %v", other, err)
	}
	// A model and its adapter, in either order: one disk holding both.
	withLoRA, err := qemu.EngineDiskFor(ctx, filepath.Join(dir, "cache"), server, qemu.EngineModel{Rel: "cosmicac/test-chat.gguf", Path: model},
		qemu.EngineModel{Rel: "cosmicac/test-chat-lora.gguf", Path: model})
	if err != nil || withLoRA == iso {
		t.Fatalf("the disk with an adapter: %s, %v", withLoRA, err)
	}
	if again, _ := qemu.EngineDiskFor(ctx, filepath.Join(dir, "cache"), server, qemu.EngineModel{Rel: "cosmicac/test-chat-lora.gguf", Path: model},
		qemu.EngineModel{Rel: "cosmicac/test-chat.gguf", Path: model}); again != withLoRA {
		t.Errorf("the same files in another order: %s, want %s", again, withLoRA)
	}
	if out, _ := exec.Command("isoinfo", "-R", "-l", "-i", withLoRA).CombinedOutput(); !strings.Contains(string(out), "test-chat-lora.gguf") {
		t.Errorf("the disk with an adapter holds:\n%s", out)
	}
	if _, err := qemu.EngineDiskFor(ctx, filepath.Join(dir, "cache"), server, qemu.EngineModel{Rel: "../x.gguf", Path: model}); err == nil {
		t.Error("a name outside models/ was taken")
	}
	out, err := exec.Command("isoinfo", "-R", "-l", "-i", iso).CombinedOutput()
	if err != nil {
		t.Fatalf("isoinfo: %v %s", err, out)
	}
	l := string(out)
	if !strings.Contains(l, "Directory listing of /models/cosmicac/") || !regexp.MustCompile(`-r-xr-xr-x .* llama-server`).MatchString(l) ||
		!strings.Contains(l, "test-chat.gguf") {
		t.Errorf("the disk holds:\n%s", l)
	}
	if out, err := exec.Command("isoinfo", "-d", "-i", iso).CombinedOutput(); err != nil || !strings.Contains(string(out), "Volume id: CACENGINE") {
		t.Errorf("label: %v %s", err, out)
	}
	vc := qemu.Config{EngineDisk: iso}
	if !strings.Contains(strings.Join(vc.Args(), " "), "file="+iso+",if=virtio,format=raw,readonly=on") {
		t.Errorf("args %v lack the engine disk, read-only", vc.Args())
	}
}

// TestMakeVolumeKeepsItsDisk: a standalone volume's disk is made once, a
// sparse qcow2 of the size asked, and kept as it is after.
func TestMakeVolumeKeepsItsDisk(t *testing.T) {
	need(t, "qemu-img")
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), ".volumes", "team", "scratch.qcow2")
	made, err := qemu.MakeVolume(ctx, path, 2)
	if err != nil || !made {
		t.Fatalf("MakeVolume = %v, %v; want a new disk", made, err)
	}
	out, err := exec.Command("qemu-img", "info", "--output=json", path).Output()
	if err != nil || !strings.Contains(string(out), `"virtual-size": 2147483648`) || !strings.Contains(string(out), `"format": "qcow2"`) {
		t.Fatalf("qemu-img info: %v\n%s", err, out)
	}
	fi, _ := os.Stat(path)
	made, err = qemu.MakeVolume(ctx, path, 5)
	fi2, _ := os.Stat(path)
	if err != nil || made || !fi2.ModTime().Equal(fi.ModTime()) || fi2.Size() != fi.Size() {
		t.Errorf("MakeVolume on a kept disk = %v, %v; want it left as it is", made, err)
	}
}

// TestVolumeArgsAgreeWithQEMU: the real QEMU takes a standalone volume's
// -drive and -device as Args writes them, read-write and read-only (it
// starts stopped, -S, and quits).
func TestVolumeArgsAgreeWithQEMU(t *testing.T) {
	need(t, "qemu-system-x86_64", "qemu-img")
	dir := t.TempDir()
	var vols []qemu.Volume
	for i, ro := range []bool{false, true} {
		p := filepath.Join(dir, fmt.Sprintf("v%d.qcow2", i))
		if _, err := qemu.MakeVolume(t.Context(), p, 1); err != nil {
			t.Fatal(err)
		}
		vols = append(vols, qemu.Volume{Path: p, Serial: fmt.Sprintf("cosmicac-vol%d", i), ReadOnly: ro})
	}
	root := filepath.Join(dir, "root.qcow2")
	if _, err := qemu.MakeVolume(t.Context(), root, 1); err != nil {
		t.Fatal(err)
	}
	args := (qemu.Config{Dir: dir, Volumes: vols}).Args()
	// The VM's own disk as Args gives it (QEMU places it), then the volumes'.
	volArgs := []string{"-drive", "file=" + root + ",if=virtio,format=qcow2"}
	for i := range args {
		if (args[i] == "-drive" && strings.Contains(args[i+1], "id=vol")) || (args[i] == "-device" && strings.HasPrefix(args[i+1], "virtio-blk-pci")) {
			volArgs = append(volArgs, args[i], args[i+1])
		}
	}
	if len(volArgs) != 10 {
		t.Fatalf("the volumes' arguments: %q", volArgs)
	}
	cmd := exec.CommandContext(t.Context(), "qemu-system-x86_64", append([]string{"-machine", "q35", "-accel", "tcg", "-S", "-nodefaults", "-display", "none", "-monitor", "stdio"}, volArgs...)...)
	cmd.Stdin = strings.NewReader("info block\ninfo pci\nquit\n")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "vol1") || !strings.Contains(string(out), "read-only") {
		t.Fatalf("QEMU with the volumes' arguments: %v\n%s", err, out)
	}
	// The guest names disks in PCI slot order: the VM's own (QEMU's slot,
	// from 1 up) must come before the volumes', which sit at 0x10 on.
	low, high, slot := 0, 0, 0
	for _, line := range strings.Split(string(out), "\n") {
		if _, err := fmt.Sscanf(strings.TrimSpace(line), "Bus  0, device %d,", &slot); err == nil {
			continue
		}
		if strings.Contains(line, "SCSI controller: PCI device 1af4:1001") { // virtio-blk
			if slot < 0x10 {
				low++
			} else {
				high++
			}
		}
	}
	if low != 1 || high != 2 {
		t.Errorf("virtio disks below slot 0x10: %d, from it: %d; want the VM's own below and the 2 volumes after:\n%s", low, high, out)
	}
}
