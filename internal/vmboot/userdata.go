package vmboot

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Paths inside the VM.
const (
	AgentConfigPath = "/etc/cosmicac/agent.yaml"
	EnvFilePath     = "/etc/cosmicac/env"
	AgentUnitName   = "cosmicac-agent.service"
	AgentUnitPath   = "/etc/systemd/system/" + AgentUnitName
	// MountScriptPath mounts the agent disk (DeliveryDisk only).
	MountScriptPath = "/etc/cosmicac/mount-agent-disk"
	// NGCKeyScriptPath copies the rack's NGC key from its disk (VM.NGCKey).
	NGCKeyScriptPath = "/etc/cosmicac/copy-ngc-key"
	// EngineScriptPath mounts the engine disk (VM.Engine).
	EngineScriptPath = "/etc/cosmicac/mount-engine-disk"
	// DefaultAgentPath is where an image that carries the agent has it
	// (DeliveryImage).
	DefaultAgentPath = "/usr/local/bin/cosmicac"
)

// StopPushWait is how long a VM's agent may take to stop: the instance
// agent pushes the job's RW volumes when its VM powers off, within
// agentapi's StopPushTimeout; a rack that waits for a VM to power off
// waits this long for one whose job has such volumes.
const StopPushWait = 11 * time.Minute

// Delivery is how the agent binary reaches the VM.
type Delivery string

// The deliveries.
const (
	// DeliveryDisk: the rack attaches the agent disk (AgentDisk) and the
	// unit mounts it and runs the agent from it. Any cloud image works.
	DeliveryDisk Delivery = "disk"
	// DeliveryImage: the image carries the agent at Agent.Path.
	DeliveryImage Delivery = "image"
)

// Agent says how the VM gets and starts the agent.
type Agent struct {
	// Delivery is DeliveryDisk (the default, when empty) or DeliveryImage.
	Delivery Delivery
	// Path is the agent binary in the image, for DeliveryImage (default
	// DefaultAgentPath). Unused with DeliveryDisk.
	Path string
}

// Binary is the path the unit runs: AgentDisk's file under its mount
// point, or the image's agent.
func (a Agent) Binary() string {
	if a.delivery() == DeliveryImage {
		if a.Path == "" {
			return DefaultAgentPath
		}
		return a.Path
	}
	return AgentMountPoint + "/" + AgentDiskFile
}

func (a Agent) delivery() Delivery {
	if a.Delivery == "" {
		return DeliveryDisk
	}
	return a.Delivery
}

// Check reports what is wrong with a, each a *cosmic.FieldError (fields
// "agentDelivery", "agentPath").
func (a Agent) Check() error {
	var errs []error
	switch a.delivery() {
	case DeliveryDisk, DeliveryImage:
	default:
		errs = append(errs, &cosmic.FieldError{Field: "agentDelivery", Message: fmt.Sprintf("%q: want %s or %s", a.Delivery, DeliveryDisk, DeliveryImage)})
	}
	if a.Path != "" && (!strings.HasPrefix(a.Path, "/") || strings.ContainsAny(a.Path, " \t\n'\"\\$%;")) {
		errs = append(errs, &cosmic.FieldError{Field: "agentPath", Message: fmt.Sprintf("%q: want an absolute path without spaces, quotes, $, %% or ;", a.Path)})
	}
	return errors.Join(errs...)
}

// Bootstrap is what a replica's in-VM agents need from the platform
// (issue 7): each VM's own identity and the peers it may talk to. The rack
// worker fills it; an empty Bootstrap leaves those out of the user data.
type Bootstrap struct {
	// Agents holds each VM's agent identity, by VM (VMI) index.
	Agents []AgentIdentity `json:"agents,omitempty"`
	// Peers are the platform's peers the agents connect to and accept.
	Peers []Peer `json:"peers,omitempty"`
}

// AgentIdentity is one agent's key pair.
type AgentIdentity struct {
	// PrivateKeyPEM is the agent's ed25519 private key (PKCS #8 PEM).
	PrivateKeyPEM string `json:"privateKeyPEM"`
	// PublicKey is its public key, 64 hex digits.
	PublicKey string `json:"publicKey"`
}

// Peer is a platform component an agent may talk to.
type Peer struct {
	Role  string   `json:"role"` // e.g. "ork", "worker", "proxy-inference"
	Key   string   `json:"key"`  // ed25519 public key, 64 hex digits
	Addrs []string `json:"addrs,omitempty"`
}

// AgentConfig is the file AgentConfigPath in each VM: what the agent
// (`cosmicac agent instance|inference --config FILE`) is told. The agents
// keep their own copy of this shape (internal/agent.FileBootstrap).
type AgentConfig struct {
	JobID    string         `json:"jobId"`
	JobType  cosmic.JobType `json:"jobType"`
	Team     string         `json:"team"`
	Replica  int            `json:"replica"`
	VMIIndex int            `json:"vmiIndex"`
	VMICount int            `json:"vmiCount"`
	// GPUs is the number of GPUs passed through to this VM.
	GPUs int `json:"gpus"`
	// Hosts are the DNS names of the replica's VMs, by index, for a
	// multi-node replica.
	Hosts []string `json:"hosts,omitempty"`
	// Identity is this VM's agent identity, when the worker gave one.
	Identity *AgentIdentity `json:"identity,omitempty"`
	Peers    []Peer         `json:"peers,omitempty"`
	// Command is the job's command (gpu-container), run with EnvFile.
	Command  []string `json:"command,omitempty"`
	EnvFile  string   `json:"envFile"`
	HTTPPort int      `json:"httpPort,omitempty"`
	GRPCPort int      `json:"grpcPort,omitempty"`
	// Inference is the model to serve (managed-inference).
	Inference *cosmic.InferenceSpec `json:"inference,omitempty"`
	// NGCKeyFile holds the parakeet runtime's NGC key (VM.NGCKey).
	NGCKeyFile string `json:"ngcKeyFile,omitempty"`
	// LlamaServer and ModelDir are the llama.cpp runtime's engine and
	// models, on the engine disk (VM.Engine).
	LlamaServer string `json:"llamaServer,omitempty"`
	ModelDir    string `json:"modelDir,omitempty"`
	// Volumes are the job's volumes the agent fills at their mount paths
	// before the command starts, and pushes back (docs/data.md).
	Volumes []AgentVolume `json:"volumes,omitempty"`
	// DataProxy, when set, is the HTTP proxy through which the agent
	// reaches the datastores (VM.DataProxy).
	DataProxy string `json:"dataProxy,omitempty"`
}

// AgentVolume is a volume as the agent is told of it: where it goes in
// the VM and what happens to it at the end; the agent asks the app-node
// to sign its requests (it holds no credential).
type AgentVolume struct {
	// Index is the volume's index in the job's spec.volumes.
	Index     int    `json:"index"`
	MountPath string `json:"mountPath"`
	// Push (RW, RWD) sends what the job wrote back when its command ends
	// or the VM stops; Delete (RWD) deletes the remote objects the job
	// deleted; Target pushes to the volumeTarget instead of the source.
	Push   bool `json:"push,omitempty"`
	Delete bool `json:"delete,omitempty"`
	Target bool `json:"target,omitempty"`
	// Git, when set, is the URL of a public Git repository the agent
	// clones into the volume (publicGit); it is never pushed.
	Git string `json:"git,omitempty"`
	// Archive and PushArchive, when set, are the formats of the source's
	// and the push's one object (dataStore.archive): unpacked into the
	// volume, packed back.
	Archive     string `json:"archive,omitempty"`
	PushArchive string `json:"pushArchive,omitempty"`
	// Standalone, when set, is the name of the job's standalone volume
	// the rack attached as the disk whose serial is Disk (StandaloneSerial):
	// the agent makes a file system on it the first time, then mounts
	// it at MountPath, read-only when ReadOnly. Nothing is copied.
	Standalone string `json:"standalone,omitempty"`
	Disk       string `json:"disk,omitempty"`
	ReadOnly   bool   `json:"readOnly,omitempty"`
}

// StandaloneSerial is the serial of the disk that holds the job's
// volume i, a standalone volume: the guest finds it at
// /dev/disk/by-id/virtio-SERIAL (at most 20 characters, virtio-blk's
// limit).
func StandaloneSerial(i int) string { return fmt.Sprintf("cosmicac-vol%d", i) }

// StandaloneVolumeGiB is the size of a standalone volume's disk: sparse,
// so that it takes on the rack's storage what the jobs wrote.
const StandaloneVolumeGiB = 100

// NeedsDataProxy says whether the job's agent reaches datastores or Git
// servers (its datastore and Git volumes): a standalone volume needs none.
func NeedsDataProxy(spec cosmic.Spec) bool {
	for _, v := range Volumes(spec) {
		if v.Standalone == "" {
			return true
		}
	}
	return false
}

// Volumes are the volumes of spec an agent fills or mounts: its
// datastore volumes, its Git volumes and its standalone volumes.
func Volumes(spec cosmic.Spec) []AgentVolume {
	var out []AgentVolume
	for i, v := range spec.Volumes {
		if st := v.Source.Standalone; st != nil {
			out = append(out, AgentVolume{Index: i, MountPath: v.MountPath, Standalone: st.Name, Disk: StandaloneSerial(i),
				ReadOnly: strings.ToUpper(v.Permission) == cosmic.PermissionRO || v.Permission == ""})
			continue
		}
		if g := v.Source.PublicGit; g != nil {
			out = append(out, AgentVolume{Index: i, MountPath: v.MountPath, Git: g.URL})
			continue
		}
		if v.Source.DataStore == nil {
			continue
		}
		perm := strings.ToUpper(v.Permission)
		av := AgentVolume{Index: i, MountPath: v.MountPath,
			Push: perm == cosmic.PermissionRW || perm == cosmic.PermissionRWD, Delete: perm == cosmic.PermissionRWD,
			Target: v.Target != nil && v.Target.TargetDataStore != nil, Archive: v.Source.DataStore.Archive}
		av.PushArchive = av.Archive
		if av.Target {
			av.PushArchive = v.Target.TargetDataStore.Archive
		}
		if !av.Push {
			av.PushArchive = ""
		}
		out = append(out, av)
	}
	return out
}

// VM is one VM of a replica of a job: everything its user data depends on.
type VM struct {
	Job     cosmic.Job
	Replica int
	// Index is the VM's index in the replica (the VMI index), of Count.
	Index, Count int
	// GPUs is the number of GPUs passed through to the VM.
	GPUs int
	// Hosts are the DNS names of the replica's VMs, by index (multi-node
	// replicas only).
	Hosts []string
	Boot  Bootstrap
	Agent Agent
	// NGCKey says the rack attaches NGCKeyDisk (a parakeet job on a rack
	// with the NGC key): the unit copies the key before the agent starts,
	// and the agent reads it from NGCKeyFile.
	NGCKey bool
	// DataProxy is the HTTP proxy URL the agent reaches datastores
	// through ("": directly): the QEMU rack's guests reach nothing but
	// the platform's forwarded ports, one of them its egress proxy.
	DataProxy string
	// Engine says the rack attaches EngineDisk (a llama.cpp job on a rack
	// that brings the engine and the model, the QEMU rack): the unit mounts
	// it before the agent starts, and the agent runs llama-server and the
	// model from it.
	Engine bool
}

// Mode is the agent's subcommand for a job type: "inference" for
// managed-inference, else "instance".
func Mode(t cosmic.JobType) string {
	if t == cosmic.TypeManagedInference {
		return "inference"
	}
	return "instance"
}

// PeersFor is the peers an agent of a job of type typ is told about: only
// an inference agent has business with proxy-inference.
func PeersFor(typ cosmic.JobType, peers []Peer) []Peer {
	if typ == cosmic.TypeManagedInference {
		return peers
	}
	return slices.DeleteFunc(slices.Clone(peers), func(p Peer) bool { return p.Role == "proxy-inference" })
}

// Config is the agent config of vm (the content of AgentConfigPath).
func Config(vm VM) AgentConfig {
	s := vm.Job.Spec
	ac := AgentConfig{
		JobID:    vm.Job.ID,
		JobType:  s.Type,
		Team:     vm.Job.Team,
		Replica:  vm.Replica,
		VMIIndex: vm.Index,
		VMICount: vm.Count,
		GPUs:     vm.GPUs,
		Hosts:    vm.Hosts,
		Peers:    PeersFor(s.Type, vm.Boot.Peers),
		Command:  s.Command,
		EnvFile:  EnvFilePath,
		HTTPPort: s.DefaultHTTPPort,
		GRPCPort: s.GRPCPort,
	}
	if vm.Index < len(vm.Boot.Agents) && vm.Boot.Agents[vm.Index] != (AgentIdentity{}) {
		id := vm.Boot.Agents[vm.Index]
		ac.Identity = &id
	}
	if s.Type == cosmic.TypeManagedInference {
		ac.Inference = s.Inference
	}
	if vm.NGCKey {
		ac.NGCKeyFile = NGCKeyFile
	}
	if s.Type == cosmic.TypeGPUContainer {
		ac.Volumes = Volumes(s)
		if len(ac.Volumes) > 0 {
			ac.DataProxy = vm.DataProxy
		}
	}
	if vm.Engine {
		ac.LlamaServer = EngineMountPoint + "/" + EngineServerFile
		ac.ModelDir = EngineMountPoint + "/" + EngineModelDir
	}
	return ac
}

// cloudConfig is the #cloud-config user data.
type cloudConfig struct {
	// ManageEtcHosts "localhost" has cloud-init map the VM's hostname (the
	// meta-data's local-hostname) to 127.0.1.1 in /etc/hosts, so that sudo
	// and other tools resolve it ("sudo: unable to resolve host" without).
	ManageEtcHosts    string   `json:"manage_etc_hosts"`
	Users             []string `json:"users"`
	SSHAuthorizedKeys []string `json:"ssh_authorized_keys,omitempty"`
	// BootCmd runs first in cloud-init's init stage, before write_files:
	// it queues the agent's start for when that stage has ended (EarlyStart).
	BootCmd    [][]string  `json:"bootcmd"`
	WriteFiles []cloudFile `json:"write_files"`
	RunCmd     [][]string  `json:"runcmd"`
}

type cloudFile struct {
	Path        string `json:"path"`
	Owner       string `json:"owner"`
	Permissions string `json:"permissions"`
	Content     string `json:"content"`
}

// UserData is the cloud-init user data (#cloud-config) of vm: the VM's
// hostname in /etc/hosts, the image's default user with the spec's SSH keys, the agent's config at
// AgentConfigPath, the job's environment at EnvFilePath, the agent's
// systemd unit at AgentUnitPath (and, with DeliveryDisk, the script that
// mounts the agent disk), and the runcmd that enables and starts the unit.
// It is pure and deterministic: the same vm, the same bytes, on every rack.
func UserData(vm VM) ([]byte, error) {
	if err := vm.Agent.Check(); err != nil {
		return nil, fmt.Errorf("user data: %w", err)
	}
	agentYAML, err := yaml.Marshal(Config(vm))
	if err != nil {
		return nil, fmt.Errorf("encode agent config: %w", err)
	}
	files := []cloudFile{
		{Path: AgentConfigPath, Owner: "root:root", Permissions: "0600", Content: string(agentYAML)},
		{Path: EnvFilePath, Owner: "root:root", Permissions: "0600", Content: EnvFile(vm.Job, vm.Replica, vm.Index)},
	}
	if vm.Agent.delivery() == DeliveryDisk {
		files = append(files, cloudFile{Path: MountScriptPath, Owner: "root:root", Permissions: "0755", Content: MountScript()})
	}
	unit := Unit(vm.Job.Spec.Type, vm.Agent)
	if vm.NGCKey {
		files = append(files, cloudFile{Path: NGCKeyScriptPath, Owner: "root:root", Permissions: "0755", Content: NGCKeyScript()})
		unit = strings.Replace(unit, "ExecStart=", "ExecStartPre="+NGCKeyScriptPath+"\nExecStart=", 1)
		if !strings.Contains(unit, "TimeoutStartSec=") {
			unit = strings.Replace(unit, "ExecStart=", "TimeoutStartSec="+strconv.Itoa(AgentDiskWait+30)+"\nExecStart=", 1)
		}
	}
	if vm.Engine {
		files = append(files, cloudFile{Path: EngineScriptPath, Owner: "root:root", Permissions: "0755", Content: EngineScript()})
		unit = strings.Replace(unit, "ExecStart=", "ExecStartPre="+EngineScriptPath+"\nExecStart=", 1)
		if !strings.Contains(unit, "TimeoutStartSec=") {
			unit = strings.Replace(unit, "ExecStart=", "TimeoutStartSec="+strconv.Itoa(AgentDiskWait+30)+"\nExecStart=", 1)
		}
	}
	files = append(files, cloudFile{Path: AgentUnitPath, Owner: "root:root", Permissions: "0644", Content: unit})
	cc := cloudConfig{
		ManageEtcHosts:    "localhost",
		Users:             []string{"default"},
		SSHAuthorizedKeys: vm.Job.Spec.SSHPublicKeys,
		BootCmd:           [][]string{EarlyStart()},
		WriteFiles:        files,
		RunCmd: [][]string{
			{"systemctl", "daemon-reload"},
			{"systemctl", "enable", "--now", AgentUnitName},
		},
	}
	body, err := yaml.Marshal(cc)
	if err != nil {
		return nil, fmt.Errorf("encode cloud-config: %w", err)
	}
	return append([]byte("#cloud-config\n"), body...), nil
}

// EarlyStartUnit is the transient unit that starts the agent early
// (EarlyStart).
const EarlyStartUnit = "cosmicac-agent-early.service"

// EarlyStart is the bootcmd that starts the agent as soon as cloud-init's
// init stage has ended, rather than after its config and final stages
// (runcmd): everything the agent and a user's login need (the files above,
// the default user, SSH keys and host keys) is written in the init stage,
// and the two later stages are a third of a boot under emulation (about
// 28 s of 83 under TCG). bootcmd runs before write_files, so it only
// queues a transient unit ordered after cloud-init.service, which reloads
// systemd and starts the unit then. runcmd still enables and starts it:
// a no-op once this ran, the start where an image's systemd cannot take
// the transient unit. It runs at every boot, harmlessly: the unit is
// enabled and started by then, or starting.
func EarlyStart() []string {
	return []string{"systemd-run", "--no-block", "--unit=" + EarlyStartUnit, "--property=After=cloud-init.service",
		"/bin/sh", "-c", "systemctl daemon-reload && systemctl enable --now " + AgentUnitName}
}

// AgentStartedLine is what the agent's unit writes to the kernel's log
// (/dev/kmsg, so the serial console) each time the agent's process has
// started: a rack that reads the console (the QEMU rack) learns of the
// start from it. systemd's own "Started cosmicac-agent.service" status
// line is not enough: systemd prints status only while the boot is
// under way, and under load one was seen missing from the console while
// the agent ran (the kernel's log is not a terminal a getty takes over).
//
// It has no quote or shell metacharacter: the unit's ExecStartPost quotes it.
const AgentStartedLine = "cosmicac-agent.service: the agent process started"

// Unit is the agent's systemd unit for a job of type typ: it starts at
// every boot, after the network, and restarts for ever (Restart=always,
// RestartSec=2, no start rate limit: a VM whose agent disk comes late keeps
// trying). With DeliveryDisk it mounts the agent disk first. The agent
// has StopPushWait to stop: at a VM's power-off it pushes the job's RW
// volumes before it exits (docs/data.md).
func Unit(typ cosmic.JobType, a Agent) string {
	mode := Mode(typ)
	lines := []string{
		"[Unit]",
		"Description=CosmicAC " + mode + " agent",
		"Wants=network-online.target",
		"After=network-online.target",
		"StartLimitIntervalSec=0",
		"",
		"[Service]",
	}
	if a.delivery() == DeliveryDisk {
		lines = append(lines, "ExecStartPre="+MountScriptPath, "TimeoutStartSec="+strconv.Itoa(AgentDiskWait+30))
	}
	lines = append(lines,
		"ExecStart="+a.Binary()+" agent "+mode+" --config "+AgentConfigPath,
		// "-": a guest without /dev/kmsg runs the agent all the same.
		"ExecStartPost=-/bin/sh -c 'echo \""+AgentStartedLine+"\" >/dev/kmsg'",
		"Restart=always",
		"RestartSec=2",
		"TimeoutStopSec="+strconv.Itoa(int(StopPushWait.Seconds())),
		"",
		"[Install]",
		"WantedBy=multi-user.target",
		"",
	)
	return strings.Join(lines, "\n")
}

// EnvFile is the job's environment: the platform's COSMICAC_ variables,
// then spec.envVars in order, one NAME='value' a line (POSIX shell quoting,
// so `set -a; . FILE` reads it back).
func EnvFile(job cosmic.Job, replica, index int) string {
	var b strings.Builder
	line := func(k, v string) {
		b.WriteString(k + "=" + shellQuote(v) + "\n")
	}
	line("COSMICAC_JOB_ID", job.ID)
	line("COSMICAC_REPLICA", strconv.Itoa(replica))
	line("COSMICAC_VMI_INDEX", strconv.Itoa(index))
	for _, e := range job.Spec.EnvVars {
		line(e.Name, e.Value)
	}
	return b.String()
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// File returns the content of the file at path in cloud-init user data
// (what UserData wrote there).
func File(userData []byte, path string) ([]byte, error) {
	var cc cloudConfig
	if err := yaml.Unmarshal(userData, &cc); err != nil {
		return nil, fmt.Errorf("user data: %w", err)
	}
	for _, f := range cc.WriteFiles {
		if f.Path == path {
			return []byte(f.Content), nil
		}
	}
	return nil, fmt.Errorf("user data has no %s", path)
}

// AgentFile returns the content of AgentConfigPath in cloud-init user data.
func AgentFile(userData []byte) ([]byte, error) { return File(userData, AgentConfigPath) }

// AgentConfigOf reads the agent config back out of cloud-init user data.
func AgentConfigOf(userData []byte) (AgentConfig, error) {
	b, err := AgentFile(userData)
	if err != nil {
		return AgentConfig{}, err
	}
	var ac AgentConfig
	if err := yaml.Unmarshal(b, &ac); err != nil {
		return AgentConfig{}, fmt.Errorf("%s: %w", AgentConfigPath, err)
	}
	return ac, nil
}
