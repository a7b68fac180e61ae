// Package qemu runs the virtual machines of the local VM rack
// (wrk-server-qemu): one QEMU process a VM, booted from a copy-on-write
// overlay on a base image of the image catalogue, with a cloud-init NoCloud
// seed (label cidata), a read-only disk holding the agent binary (label
// COSMICAC), and user-mode networking that reaches nothing but the ports it
// is told to forward, each guest connection relayed by the process that
// started the VM, up to a cap. It uses KVM where the host's /dev/kvm can
// run a guest, QEMU's software emulation (TCG) otherwise.
//
// It knows VMs only: the rack worker (internal/qemuworker) maps jobs onto
// them. It runs qemu-system-x86_64, qemu-img and genisoimage, and imports
// no other CosmicAC package but its own internal/qemu/handoff.
package qemu

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The files of a VM's directory.
const (
	OverlayFile = "disk.qcow2"   // the VM's disk: an overlay on the base image
	SeedFile    = "seed.iso"     // the NoCloud seed
	ConsoleFile = "console.log"  // the serial console of the VM's last boot (Start makes it anew)
	PIDFile     = "qemu.pid"     // the QEMU process, while it runs
	MonitorFile = "monitor.sock" // QEMU's monitor (QMP), for a graceful power-off
	ErrFile     = "qemu.err"     // QEMU's standard error, of its last start
)

// Forward lets the guest reach one TCP port of the host: the guest dials
// GuestAddr (in QEMU's user network, e.g. 10.0.2.100:7001) and reaches
// HostAddr (e.g. 127.0.0.1:7001). Nothing else of the host or the network
// is reachable from the guest (QEMU's restrict=on). QEMU 7.2 forwards a
// guest connection either to a chardev, one connection made at QEMU's
// start and shared by every guest connection, or to a command run for
// each connection (guestfwd=…-cmd:), its standard input and output the
// guest's socket. So each connection runs Config.Relay, which hands the
// socket to the process that started the VM (internal/qemu/handoff) and
// exits; that process relays it to HostAddr, at most Config.MaxConns
// connections of the VM's at once.
type Forward struct {
	GuestAddr, HostAddr string
}

// CheckForwards says whether QEMU will accept fwd as guestfwd rules: each
// guest address is host:port, no two share one, and no guest port is
// another's with its two bytes swapped. libslirp (4.7.0, Debian 12's)
// compares a new rule's port, in host order, with the ports of the rules
// before it, which it keeps in network order (check_guestfwd in
// libslirp's src/slirp.c), so rules on ports 45016 and 55471
// (0xAFD8, 0xD8AF) make QEMU exit with "Conflicting/invalid host:port in
// guest forwarding rule". Ports picked from a small range (7001, 7002, …)
// never meet it.
func CheckForwards(fwd []Forward) error {
	seen := map[string]bool{}
	swapped := map[string]string{} // host:swapped port -> the rule's guest address
	for _, f := range fwd {
		host, p, err := net.SplitHostPort(f.GuestAddr)
		if err != nil {
			return fmt.Errorf("qemu: forward guest address %q: %w", f.GuestAddr, err)
		}
		port, err := strconv.ParseUint(p, 10, 16)
		if err != nil || port == 0 || net.ParseIP(host).To4() == nil {
			return fmt.Errorf("qemu: forward guest address %q: want IPv4:port", f.GuestAddr)
		}
		if seen[f.GuestAddr] {
			return fmt.Errorf("qemu: two forwards at guest address %s", f.GuestAddr)
		}
		seen[f.GuestAddr] = true
		if other, ok := swapped[f.GuestAddr]; ok {
			return fmt.Errorf("qemu: forwards at %s and %s: libslirp takes two ports whose bytes are swapped for the same port", other, f.GuestAddr)
		}
		swapped[net.JoinHostPort(host, strconv.Itoa(int(bits.ReverseBytes16(uint16(port)))))] = f.GuestAddr
	}
	return nil
}

// Config is one VM.
type Config struct {
	// Dir holds the VM's overlay, seed, console log and pid file. Its
	// overlay survives Stop and a new Start (restart keeps the disk);
	// Remove deletes it.
	Dir   string
	Image Image
	CPUs  int
	// MemoryMiB is the guest's memory.
	MemoryMiB int
	// DiskGiB is the overlay's virtual size (0: the base image's).
	DiskGiB int
	// UserData, MetaData and NetworkConfig make the NoCloud seed.
	UserData, MetaData, NetworkConfig []byte
	// AgentDisk is a read-only ISO (label COSMICAC) with the agent binary,
	// shared by the VMs (AgentDiskFor builds it); "" attaches none.
	AgentDisk string
	// EngineDisk is a read-only ISO (label CACENGINE) with llama-server and
	// the job's model, for a llama.cpp replica (EngineDiskFor); "" attaches
	// none.
	EngineDisk string
	// Volumes are disks kept apart from the VM (standalone volumes:
	// MakeVolume), attached with their serials.
	Volumes []Volume
	// Forwards are the host ports the guest may reach.
	Forwards []Forward
	// SSHPort, when not 0, forwards 127.0.0.1:SSHPort on the host to the
	// guest's port 22.
	SSHPort int
	// Accel is "kvm" or "tcg" (Detect picks); TCGCacheMiB is TCG's
	// translation cache (default 128).
	Accel       string
	TCGCacheMiB int
	// VFIO are host PCI addresses (0000:41:00.0) passed through.
	VFIO []string
	// QEMU is the emulator's path (default qemu-system-x86_64 on PATH).
	QEMU string
	// Relay is the program a forwarded connection runs: `Relay… SOCKET
	// GUEST` hands its standard input to the VM's relay socket (handoff.Send;
	// `cosmicac qemu-relay`). Required with Forwards.
	Relay []string
	// MaxConns caps the guest connections to Forwards relayed at once
	// (default DefaultMaxConns); one more is reset at once, counted
	// (VM.Relays), and given to OnRefused when it is set.
	MaxConns  int
	OnRefused func(guestAddr string)
	// Detach runs QEMU in a session of its own, with no signal at the
	// death of the process that starts it, so that the VM outlives that
	// process (a worker's restart, upgrade or crash): a later process
	// takes it over with Adopt. Otherwise QEMU is killed when the process
	// that started it dies.
	Detach bool
}

// Args is QEMU's command line for c, the seed and overlay being in place.
func (c Config) Args() []string {
	accel := c.Accel
	if accel == "" {
		accel = "tcg"
	}
	if accel == "tcg" {
		tb := c.TCGCacheMiB
		if tb <= 0 {
			tb = 128
		}
		accel = "tcg,tb-size=" + strconv.Itoa(tb)
	}
	cpus, mem := c.CPUs, c.MemoryMiB
	if cpus <= 0 {
		cpus = 1
	}
	if mem <= 0 {
		mem = 512
	}
	net := "user,id=n0,restrict=on"
	for _, f := range c.Forwards {
		var cmd []string
		for _, a := range append(slices.Clone(c.Relay), filepath.Join(c.Dir, RelaySocket), f.GuestAddr) {
			cmd = append(cmd, shellQuote(a))
		}
		net += ",guestfwd=tcp:" + f.GuestAddr + "-cmd:" + strings.ReplaceAll(strings.Join(cmd, " "), ",", ",,")
	}
	if c.SSHPort != 0 {
		net += fmt.Sprintf(",hostfwd=tcp:127.0.0.1:%d-:22", c.SSHPort)
	}
	args := []string{
		"-name", filepath.Base(c.Dir),
		"-machine", "q35", "-accel", accel, "-cpu", cpuModel(c.Accel),
		"-smp", strconv.Itoa(cpus), "-m", strconv.Itoa(mem),
		"-nodefaults", "-no-user-config", "-display", "none",
		"-serial", "file:" + filepath.Join(c.Dir, ConsoleFile),
		"-qmp", "unix:" + filepath.Join(c.Dir, MonitorFile) + ",server=on,wait=off",
		"-pidfile", filepath.Join(c.Dir, PIDFile),
		"-drive", "file=" + filepath.Join(c.Dir, OverlayFile) + ",if=virtio,format=qcow2,cache=unsafe,discard=unmap",
		"-drive", "file=" + filepath.Join(c.Dir, SeedFile) + ",if=virtio,format=raw,readonly=on",
		"-netdev", net, "-device", "virtio-net-pci,netdev=n0",
		"-device", "virtio-rng-pci",
	}
	if c.AgentDisk != "" {
		args = append(args, "-drive", "file="+c.AgentDisk+",if=virtio,format=raw,readonly=on")
	}
	if c.EngineDisk != "" {
		args = append(args, "-drive", "file="+c.EngineDisk+",if=virtio,format=raw,readonly=on")
	}
	for i, v := range c.Volumes {
		// The host's cache honours the guest's flushes (no cache=unsafe, as
		// the replica's own disk has): the volume outlives the VM. The
		// serial is the device's (QEMU 7 refuses it on -drive), and the
		// device sits at a PCI slot of its own past the ones QEMU gives the
		// disks above (volumeSlot): the guest names disks in slot order,
		// and an image's kernel command line may say root=/dev/vda.
		id := fmt.Sprintf("vol%d", i)
		d := "file=" + strings.ReplaceAll(v.Path, ",", ",,") + ",if=none,id=" + id + ",format=qcow2,discard=unmap"
		if v.ReadOnly {
			d += ",readonly=on"
		}
		dev := fmt.Sprintf("virtio-blk-pci,drive=%s,serial=%s,addr=%#x.%d", id, v.Serial, volumeSlot+i/8, i%8)
		if i%8 == 0 {
			dev += ",multifunction=on"
		}
		args = append(args, "-drive", d, "-device", dev)
	}
	if c.Image.Kernel != "" {
		args = append(args, "-kernel", c.Image.Kernel, "-append", c.Image.Cmdline)
		if c.Image.Initrd != "" {
			args = append(args, "-initrd", c.Image.Initrd)
		}
	}
	for _, d := range c.VFIO {
		args = append(args, "-device", "vfio-pci,host="+d)
	}
	return args
}

func cpuModel(accel string) string {
	if accel == "kvm" {
		return "host"
	}
	return "max"
}

// volumeSlot is the first PCI slot of the volumes' disks: eight to a
// slot, as functions 0-7, up to slot 0x13 for 32 volumes; QEMU gives the
// VM's own devices the slots from 1 up, and q35 keeps 0x1f.
const volumeSlot = 0x10

// Volume is a disk attached to a VM that is not the VM's own: a
// standalone volume's qcow2 (MakeVolume), which the guest finds at
// /dev/disk/by-id/virtio-SERIAL.
type Volume struct {
	Path, Serial string
	ReadOnly     bool
}

// MakeVolume makes the qcow2 disk of a standalone volume at path, of
// sizeGiB (sparse: it takes what the guest writes), unless it exists; it
// says whether it made it. The disk has no file system: the guest's agent
// makes one the first time.
func MakeVolume(ctx context.Context, path string, sizeGiB int) (bool, error) {
	if _, err := os.Stat(path); err == nil {
		return false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return false, err
	}
	tmp := path + ".new"
	if out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", tmp, strconv.Itoa(sizeGiB)+"G").CombinedOutput(); err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("qemu-img create: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return true, os.Rename(tmp, path)
}

// Prepare makes the VM's directory, its overlay if there is none (an
// existing one is the VM's disk, kept), and its seed (always anew).
func Prepare(ctx context.Context, c Config) (created bool, err error) {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return false, err
	}
	overlay := filepath.Join(c.Dir, OverlayFile)
	if _, err := os.Stat(overlay); errors.Is(err, os.ErrNotExist) {
		args := []string{"create", "-q", "-f", "qcow2", "-F", c.Image.Format, "-b", c.Image.Disk, overlay + ".tmp"}
		if c.DiskGiB > 0 {
			args = append(args, strconv.Itoa(c.DiskGiB)+"G")
		}
		if out, err := exec.CommandContext(ctx, "qemu-img", args...).CombinedOutput(); err != nil {
			return false, fmt.Errorf("qemu-img create: %v: %s", err, strings.TrimSpace(string(out)))
		}
		if err := os.Rename(overlay+".tmp", overlay); err != nil {
			return false, err
		}
		created = true
	} else if err != nil {
		return false, err
	}
	return created, WriteSeed(ctx, filepath.Join(c.Dir, SeedFile), c.UserData, c.MetaData, c.NetworkConfig)
}

// WriteSeed writes a NoCloud seed: an ISO 9660 image labelled cidata with
// user-data, meta-data and, when given, network-config.
func WriteSeed(ctx context.Context, path string, userData, metaData, networkConfig []byte) error {
	files := map[string][]byte{"user-data": userData, "meta-data": metaData}
	if len(networkConfig) > 0 {
		files["network-config"] = networkConfig
	}
	return writeISO(ctx, path, "cidata", files)
}

// AgentDiskLabel is the ISO 9660 label of the agent's disk, and AgentFile
// the binary's name on it (internal/vmboot mounts and runs it).
const (
	AgentDiskLabel = "COSMICAC"
	AgentFile      = "cosmicac"
)

// AgentDiskFor is the agent disk holding binary, built once in dir for the
// binary's contents (its name carries the binary's size and modification
// time) and shared read-only by every VM.
func AgentDiskFor(ctx context.Context, dir, binary string) (string, error) {
	st, err := os.Stat(binary)
	if err != nil {
		return "", fmt.Errorf("agent binary: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("agent-%d-%d.iso", st.Size(), st.ModTime().UnixNano()))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	b, err := os.ReadFile(binary)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return path, writeISO(ctx, path, AgentDiskLabel, map[string][]byte{AgentFile: b})
}

// EngineModel is a file of the engine disk's models directory: the host's
// file Path at models/Rel (Rel: a model's or an adapter's name,
// ORG/NAME.gguf).
type EngineModel struct{ Rel, Path string }

// EngineDiskFor is the engine disk of a llama.cpp replica
// (vmboot.EngineDisk): llama-server (the file server) at its root and the
// model files under models/ (the job's model and its LoRA adapters), built
// once in dir for each engine and set of files (by their sizes, times and
// names) and shared by the replicas that serve them.
func EngineDiskFor(ctx context.Context, dir, server string, models ...EngineModel) (string, error) {
	models = slices.Clone(models)
	slices.SortFunc(models, func(a, b EngineModel) int { return strings.Compare(a.Rel, b.Rel) })
	files := map[string]string{EngineServerFile: server}
	var key []string
	for _, f := range append([]EngineModel{{Path: server}}, models...) {
		st, err := os.Stat(f.Path)
		if err != nil {
			return "", fmt.Errorf("engine disk: %w", err)
		}
		key = append(key, fmt.Sprintf("%s=%d-%d", f.Rel, st.Size(), st.ModTime().UnixNano()))
		if f.Rel != "" {
			if strings.HasPrefix(f.Rel, "/") || strings.Contains(f.Rel, "..") {
				return "", fmt.Errorf("engine disk: %q is not a relative name", f.Rel)
			}
			files["models/"+f.Rel] = f.Path
		}
	}
	h := sha256.Sum256([]byte(strings.Join(key, "/")))
	path := filepath.Join(dir, fmt.Sprintf("engine-%x.iso", h[:8]))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	contents := map[string][]byte{}
	for name, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("engine disk: %w", err)
		}
		contents[name] = b
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return path, writeISO(ctx, path, EngineDiskLabel, contents)
}

// EngineDiskLabel is the ISO 9660 label of the engine disk, and
// EngineServerFile its llama-server (vmboot.EngineDisk).
const (
	EngineDiskLabel  = "CACENGINE"
	EngineServerFile = "llama-server"
)

// writeISO builds an ISO 9660 image (Rock Ridge, so modes are kept) of
// files with genisoimage, atomically.
func writeISO(ctx context.Context, path, label string, files map[string][]byte) error {
	src, err := os.MkdirTemp(filepath.Dir(path), ".iso-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(src)
	for name, b := range files {
		mode := os.FileMode(0o644)
		if name == AgentFile || name == EngineServerFile {
			mode = 0o755
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, name)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(src, name), b, mode); err != nil {
			return err
		}
	}
	tmp := path + ".tmp"
	out, err := exec.CommandContext(ctx, "genisoimage", "-quiet", "-output", tmp, "-volid", label, "-rational-rock", "-joliet", src).CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("genisoimage: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return os.Rename(tmp, path)
}

// VM is a running QEMU process: one this process started, or one it
// adopted (Adopt).
type VM struct {
	cfg    Config
	pid    int
	cmd    *exec.Cmd // nil: adopted
	relays *relays
	done   chan struct{}
	err    error
	once   sync.Once
	// released is closed by Release: this process lets the VM be.
	released    chan struct{}
	releaseOnce sync.Once
}

// Start starts the VM; Prepare must have run.
func Start(c Config) (*VM, error) {
	if len(c.Forwards) > 0 && len(c.Relay) == 0 {
		return nil, errors.New("qemu: forwards need a relay program")
	}
	if err := CheckForwards(c.Forwards); err != nil {
		return nil, err
	}
	bin := c.QEMU
	if bin == "" {
		bin = "qemu-system-x86_64"
	}
	// QEMU's standard error goes to a file of the VM's, not a pipe: a
	// detached QEMU writes on after the process that started it is gone.
	errf, err := os.OpenFile(filepath.Join(c.Dir, ErrFile), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer errf.Close()
	rl, err := listenRelays(c)
	if err != nil {
		return nil, err
	}
	// This boot's console starts empty, so that whoever follows it
	// (FollowConsole) never reads an earlier boot's lines.
	if err := os.Remove(filepath.Join(c.Dir, ConsoleFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		rl.close()
		return nil, err
	}
	cmd := exec.Command(bin, c.Args()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if c.Detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // its own session and process group
	}
	cmd.Stderr = errf
	if err := cmd.Start(); err != nil {
		rl.close()
		return nil, fmt.Errorf("start qemu: %w", err)
	}
	vm := &VM{cfg: c, pid: cmd.Process.Pid, cmd: cmd, relays: rl, done: make(chan struct{}), released: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		if err != nil {
			if tail := errTail(c.Dir); tail != "" {
				err = fmt.Errorf("%w: %s", err, tail)
			}
		}
		select {
		case <-vm.released:
			// Another process may own the VM's directory now: its files
			// are not this process's to remove.
		default:
			rl.close()
			os.Remove(filepath.Join(c.Dir, PIDFile))
		}
		vm.err = err
		close(vm.done)
	}()
	return vm, nil
}

// ErrNotRunning is Adopt's answer for a VM whose QEMU is not running.
var ErrNotRunning = errors.New("qemu: the VM is not running")

// ErrExitNotSeen is how an adopted VM ended (Err): QEMU's exit status
// went to the process that started it, which reaped it.
var ErrExitNotSeen = errors.New("QEMU ended (its exit status went to the process that started it)")

// Adopt takes over the VM of c.Dir that an earlier process started with
// Detach and left running (its pid file names it, and its command line
// names the VM's disk): this process then takes the guest's connections
// to c.Forwards (which may name other host addresses than the first
// process's, for the same guest addresses), stops it, and sees it end,
// as if it had started it. Err of an adopted VM is ErrExitNotSeen
// (with QEMU's standard error, when it wrote any). ErrNotRunning: no
// QEMU of the VM's runs.
func Adopt(c Config) (*VM, error) {
	pid, ok := runningPID(c.Dir)
	if !ok {
		return nil, ErrNotRunning
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil, ErrNotRunning
	}
	if err != nil {
		return nil, fmt.Errorf("qemu: adopt pid %d: %w", pid, err)
	}
	// The descriptor pins the process: had the pid been reused since the
	// check, the process it names now is another's.
	if pid2, ok := runningPID(c.Dir); !ok || pid2 != pid || exited(fd) {
		unix.Close(fd)
		return nil, ErrNotRunning
	}
	rl, err := listenRelays(c)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	vm := &VM{cfg: c, pid: pid, relays: rl, done: make(chan struct{}), released: make(chan struct{})}
	go vm.watch(fd)
	return vm, nil
}

// watch waits for an adopted VM's process to end (its pidfd readable),
// or for Release.
func (v *VM) watch(fd int) {
	defer unix.Close(fd)
	for {
		select {
		case <-v.released:
			return
		default:
		}
		if !exited(fd) {
			unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 500)
			continue
		}
		v.err = ErrExitNotSeen
		if tail := errTail(v.cfg.Dir); tail != "" {
			v.err = fmt.Errorf("%w: %s", ErrExitNotSeen, tail)
		}
		v.relays.close()
		os.Remove(filepath.Join(v.cfg.Dir, PIDFile))
		close(v.done)
		return
	}
}

// exited says whether the process of pidfd fd has ended.
func exited(fd int) bool {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, 0)
	return err == nil && n > 0
}

// Release lets the VM run on without this process, which stops taking
// its guest's connections (the process that adopts it next takes them)
// and watching it: Done is never closed after. For a VM started with
// Detach, when its worker leaves it running.
func (v *VM) Release() {
	v.releaseOnce.Do(func() {
		close(v.released)
		v.relays.close()
	})
}

// Pid is QEMU's process ID.
func (v *VM) Pid() int { return v.pid }

// errTail is the start of what QEMU wrote on its standard error.
func errTail(dir string) string {
	f, err := os.Open(filepath.Join(dir, ErrFile))
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, 4096)
	n, _ := io.ReadFull(f, b)
	return strings.TrimSpace(string(b[:n]))
}

// Relays counts the guest's connections to the forwards.
func (v *VM) Relays() RelayStats { return v.relays.Stats() }

// Done is closed when the QEMU process has exited (and its relayed
// connections have ended); Err then says how.
func (v *VM) Done() <-chan struct{} { return v.done }

// Err is how the process ended (nil: the guest powered off).
func (v *VM) Err() error {
	<-v.done
	return v.err
}

// PowerButtonRepeat is how often Stop presses the guest's power button
// again while the guest runs on. A press is an edge the guest's power-key
// handler (systemd-logind) must be listening for: one that comes while the
// guest still boots, before logind has opened its input device, is lost,
// and a guest under TCG on a loaded host was seen to run on for minutes
// after the only press. A press while the guest already shuts down is
// ignored by it.
const PowerButtonRepeat = 15 * time.Second

// Stop powers the guest off (ACPI, through QMP; the button pressed again
// every PowerButtonRepeat) and waits up to grace, then kills QEMU. The
// disk stays.
func (v *VM) Stop(grace time.Duration) {
	v.once.Do(func() {
		if grace > 0 && PowerOff(filepath.Join(v.cfg.Dir, MonitorFile), v.done, grace, PowerButtonRepeat) {
			return
		}
		syscall.Kill(-v.pid, syscall.SIGKILL) // QEMU's process group: QEMU and its forwards' relay commands
		<-v.done
	})
}

// PowerOff presses the power button of the VM whose QMP socket is sock,
// again every repeat, until done is closed (true) or grace has passed or
// QMP refuses the first press (false).
func PowerOff(sock string, done <-chan struct{}, grace, repeat time.Duration) bool {
	if err := qmp(sock, "system_powerdown"); err != nil {
		return false
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	again := time.NewTicker(repeat)
	defer again.Stop()
	for {
		select {
		case <-done:
			return true
		case <-deadline.C:
			return false
		case <-again.C:
			qmp(sock, "system_powerdown") // a QEMU that exits meanwhile refuses it: done says so next
		}
	}
}

// qmp sends one command on QEMU's QMP socket.
func qmp(sock, command string) error {
	c, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	if _, err := r.ReadString('\n'); err != nil { // the greeting
		return err
	}
	for _, cmd := range []string{`{"execute":"qmp_capabilities"}`, `{"execute":"` + command + `"}`} {
		if _, err := fmt.Fprintln(c, cmd); err != nil {
			return err
		}
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return err
			}
			if strings.Contains(line, `"return"`) {
				break
			}
			if strings.Contains(line, `"error"`) {
				return fmt.Errorf("qmp %s: %s", command, strings.TrimSpace(line))
			}
		}
	}
	return nil
}

// Remove deletes the VM's directory: its disk, seed and logs.
func Remove(dir string) error { return os.RemoveAll(dir) }

// KillStale kills a QEMU left running in dir by an earlier worker process
// (its pid file names it and its command line names dir), so that a
// restarted worker starts from a clean slate.
func KillStale(dir string) {
	pid, ok := runningPID(dir)
	if !ok {
		return
	}
	syscall.Kill(pid, syscall.SIGKILL)
	for range 50 {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	os.Remove(filepath.Join(dir, PIDFile))
}

// runningPID is the QEMU of the VM in dir, while it runs: the pid file
// names it, and its command line names the VM's disk (not a process that
// took a pid since freed).
func runningPID(dir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dir, PIDFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), "file="+filepath.Join(dir, OverlayFile)+",") {
		return 0, false
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// A zombie (state Z, after the comm in parentheses) has ended.
		if i := strings.LastIndexByte(string(st), ')'); i >= 0 && strings.HasPrefix(string(st[i:]), ") Z") {
			return 0, false
		}
	}
	return pid, true
}

// ConsoleTail is the last n bytes of the VM's serial console.
func ConsoleTail(dir string, n int64) string {
	f, err := os.Open(filepath.Join(dir, ConsoleFile))
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	f.ReadAt(b, off)
	return string(b)
}
