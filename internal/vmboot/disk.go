package vmboot

import (
	"strconv"
	"strings"
)

// DiskSpec describes a small read-only ISO 9660 disk a rack attaches to a
// VM: the volume label the guest finds it by (/dev/disk/by-label/LABEL) and
// the files at its root.
type DiskSpec struct {
	// Label is the ISO 9660 volume label (genisoimage -V).
	Label string
	// Files are the names of the files at the disk's root.
	Files []string
	// MountPoint is where the guest mounts it ("" when cloud-init reads
	// it itself, as the NoCloud seed).
	MountPoint string
}

// File is the first of d's files.
func (d DiskSpec) File() string { return d.Files[0] }

// AgentDisk is the agent disk's contract: an ISO 9660 volume labelled
// COSMICAC (Rock Ridge, so the file keeps its name and mode) holding
// the agent binary `cosmicac` at its root, a static Linux build
// (CGO_ENABLED=0) for the VM's architecture. MountScript mounts it
// read-only at /run/cosmicac. hack/agent-disk.sh builds it; on Kubernetes
// it is a containerDisk (deploy/agent-disk.Containerfile) attached as a
// read-only CD-ROM; a QEMU rack attaches the ISO file the same way
// (-drive file=agent.iso,media=cdrom,readonly=on).
var AgentDisk = DiskSpec{Label: AgentDiskLabel, Files: []string{AgentDiskFile}, MountPoint: AgentMountPoint}

// The agent disk's label, file and mount point (AgentDisk).
const (
	AgentDiskLabel  = "COSMICAC"
	AgentDiskFile   = "cosmicac"
	AgentMountPoint = "/run/cosmicac"
	// AgentDiskWait is how many seconds MountScript waits for the disk.
	AgentDiskWait = 120
)

// NGCKeyDisk is the disk of the rack's NGC API key, which the parakeet
// runtime (NVIDIA's ASR NIM) needs to download its model: on Kubernetes, a
// Secret in the rack's namespace with the key under data "ngc-api-key",
// attached by KubeVirt as a config disk labelled CACNGC (secret volume,
// volumeLabel: kubevirt.io/api core/v1 SecretVolumeSource). NGCKeyScript
// copies the key to NGCKeyFile, on a tmpfs in a directory only root
// enters, and unmounts the disk.
var NGCKeyDisk = DiskSpec{Label: NGCKeyLabel, Files: []string{NGCKeyName}}

// The NGC key disk's label and file, and where the VM keeps the key.
const (
	NGCKeyLabel = "CACNGC"
	NGCKeyName  = "ngc-api-key"
	NGCKeyDir   = "/run/cosmicac-ngc"
	NGCKeyFile  = NGCKeyDir + "/" + NGCKeyName
)

// NGCKeyScript is the script at NGCKeyScriptPath the unit runs before an
// inference agent whose rack gives the NGC key: it waits up to
// AgentDiskWait seconds for the disk labelled NGCKeyLabel, mounts it
// read-only in a fresh root-only directory, copies the key to NGCKeyFile
// (root, 0600, in NGCKeyDir, 0700, under /run: never on the VM's disk),
// and unmounts it.
func NGCKeyScript() string {
	return strings.Join([]string{
		"#!/bin/sh",
		"# Copy the rack's NGC API key (disk label " + NGCKeyLabel + ") to " + NGCKeyFile + ".",
		"set -eu",
		"dev=/dev/disk/by-label/" + NGCKeyLabel,
		"i=0",
		`while [ ! -e "$dev" ]; do`,
		"  i=$((i + 1))",
		"  if [ \"$i\" -gt " + strconv.Itoa(AgentDiskWait) + " ]; then",
		`    echo "cosmicac: no NGC key disk: $dev did not appear in ` + strconv.Itoa(AgentDiskWait) + ` s (the rack's ngcKeySecret; see docs/k8s-worker.md)" >&2`,
		"    exit 1",
		"  fi",
		"  sleep 1",
		"done",
		"umask 077",
		"mkdir -p " + NGCKeyDir,
		"chmod 0700 " + NGCKeyDir,
		`m=$(mktemp -d)`,
		`mount -o ro "$dev" "$m"`,
		`trap 'umount "$m"; rmdir "$m"' EXIT`,
		`cp "$m/` + NGCKeyName + `" ` + NGCKeyFile + ".new",
		"chmod 0600 " + NGCKeyFile + ".new",
		"mv " + NGCKeyFile + ".new " + NGCKeyFile,
		"",
	}, "\n")
}

// Seed is the cloud-init NoCloud seed disk (the "cidata" volume cloud-init
// looks for) a rack without KubeVirt's cloudInitNoCloud builds: user-data
// (UserData), meta-data (MetaData). No network-config: both racks give the
// VM one NIC with DHCP (KubeVirt's masquerade, QEMU's user network), which
// is what cloud-init's fallback network configuration sets up.
var Seed = DiskSpec{Label: "cidata", Files: []string{SeedUserData, SeedMetaData}}

// The NoCloud seed's file names.
const (
	SeedUserData = "user-data"
	SeedMetaData = "meta-data"
)

// GenisoimageArgs are the arguments of genisoimage (or mkisofs, xorriso
// -as mkisofs) that write d as the ISO file out from dir, a directory
// holding d's files: Rock Ridge (names and modes as in dir), Joliet, the
// label (the arguments cloud-localds passes).
// For AgentDisk, dir holds the executable `cosmicac`; for Seed, user-data
// and meta-data.
func (d DiskSpec) GenisoimageArgs(out, dir string) []string {
	return []string{"-quiet", "-output", out, "-volid", d.Label, "-joliet", "-rock", dir}
}

// MetaData is the NoCloud meta-data of a VM: its instance ID (cloud-init
// runs its once-per-instance modules again when it changes: use one that
// stays the same across restarts of the same VM and disk) and its host
// name. (KubeVirt writes its own for a VMI.)
func MetaData(instanceID, hostname string) []byte {
	return []byte("instance-id: " + strconv.Quote(instanceID) + "\nlocal-hostname: " + strconv.Quote(hostname) + "\n")
}

// MountScript is the script at MountScriptPath the unit runs before the
// agent (DeliveryDisk): it waits up to AgentDiskWait seconds for the disk
// labelled AgentDiskLabel, and mounts it read-only at AgentMountPoint
// unless something is mounted there already.
func MountScript() string {
	return mountScript(AgentDiskLabel, AgentMountPoint, "the CosmicAC agent disk", "no agent disk", "docs/k8s-worker.md")
}

// EngineDisk is the engine disk of a llama.cpp replica on a rack that
// brings the engine and the model itself (the QEMU rack): an ISO 9660
// volume labelled CACENGINE (Rock Ridge) with llama-server at its root and
// the job's model under models/ (ORG/NAME.gguf), mounted read-only at
// EngineMountPoint by EngineScript before the agent starts. The agent's
// config names both (AgentConfig.LlamaServer, ModelDir).
var EngineDisk = DiskSpec{Label: EngineDiskLabel, Files: []string{EngineServerFile}, MountPoint: EngineMountPoint}

// The engine disk's label, files and mount point (EngineDisk).
const (
	EngineDiskLabel  = "CACENGINE"
	EngineServerFile = "llama-server"
	EngineModelDir   = "models"
	EngineMountPoint = "/run/cosmicac-engine"
)

// EngineScript is the script at EngineScriptPath the unit runs before an
// agent whose rack attaches the engine disk: it waits up to AgentDiskWait
// seconds for the disk labelled EngineDiskLabel and mounts it read-only at
// EngineMountPoint, unless something is mounted there already.
func EngineScript() string {
	return mountScript(EngineDiskLabel, EngineMountPoint, "the llama.cpp engine disk", "no engine disk", "docs/qemu-rack.md")
}

// mountScript waits for the disk labelled label and mounts it read-only
// at dir.
func mountScript(label, dir, what, missing, doc string) string {
	return strings.Join([]string{
		"#!/bin/sh",
		"# Mount " + what + " (ISO 9660, label " + label + ") read-only at " + dir + ".",
		"set -eu",
		"dev=/dev/disk/by-label/" + label,
		"dir=" + dir,
		`if mountpoint -q "$dir"; then exit 0; fi`,
		"i=0",
		`while [ ! -e "$dev" ]; do`,
		"  i=$((i + 1))",
		"  if [ \"$i\" -gt " + strconv.Itoa(AgentDiskWait) + " ]; then",
		`    echo "cosmicac: ` + missing + `: $dev did not appear in ` + strconv.Itoa(AgentDiskWait) + ` s (the rack attaches it; see ` + doc + `)" >&2`,
		"    exit 1",
		"  fi",
		"  sleep 1",
		"done",
		`mkdir -p "$dir"`,
		`mount -o ro "$dev" "$dir"`,
		"",
	}, "\n")
}
