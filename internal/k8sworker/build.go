package k8sworker

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/vmboot"
)

// Labels every object of a job carries (the root and the Services carry no
// vmi-index; only a multi-node replica's VMIs carry a role).
const (
	LabelJob       = "cosmicac.io/job"
	LabelTeam      = "cosmicac.io/team"
	LabelReplica   = "cosmicac.io/replica"
	LabelVMIIndex  = "cosmicac.io/vmi-index"
	LabelRole      = "cosmicac.io/role" // RoleHead or RoleWorker
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "cosmicac"
	RoleHead       = "head"   // VMI 0 of a multi-node replica
	RoleWorker     = "worker" // the other VMIs of a multi-node replica
)

// Annotations the builders set.
const (
	// AnnotationSpecHash is on every object: SpecHash of the job's spec.
	AnnotationSpecHash = "cosmicac.io/spec-hash"
	// AnnotationTeam holds the team's name when it is not a valid label
	// value (the label then holds a hash of it).
	AnnotationTeam = "cosmicac.io/team"
	// AnnotationJobName holds spec.name, when set.
	AnnotationJobName = "cosmicac.io/job-name"
	// AnnotationNode and AnnotationGPUs are on every VMI: the reserved node
	// and the reserved GPU indices on it ("0,1,2,3"). KubeVirt's device
	// plugin picks the physical GPUs; the indices are the ork's bookkeeping.
	AnnotationNode = "cosmicac.io/node"
	AnnotationGPUs = "cosmicac.io/gpus"
	// AnnotationCDIDeleteAfterCompletion keeps a finished DataVolume (CDI's
	// garbage collection would otherwise delete it, and with it the import
	// status the worker watches).
	AnnotationCDIDeleteAfterCompletion = "cdi.kubevirt.io/storage.deleteAfterCompletion"
)

// The Secret key of the cloud-init user data, and paths inside the VM
// (vmboot's).
const (
	UserDataKey     = "userdata"
	AgentConfigPath = vmboot.AgentConfigPath
	EnvFilePath     = vmboot.EnvFilePath
	AgentUnitPath   = vmboot.AgentUnitPath
)

// Names of the fixed VMI devices, networks and volumes.
const (
	rootDisk      = "rootdisk"
	cloudInitDisk = "cloudinitdisk"
	agentDisk     = "agentdisk"
	engineDisk    = "enginedisk"
	ngcKeyDisk    = "ngckey"
	podNetwork    = "default"
	overlayNet    = "overlay"
)

// Object is a Kubernetes object of the graph (what controller-runtime calls
// client.Object).
type Object interface {
	metav1.Object
	runtime.Object
}

// Graph is the objects of one replica of a job, TypeMeta set, ready for
// server-side apply. Every object but Root is owned by Root once SetOwner
// is called with the applied Root.
type Graph struct {
	// Root is the job's root object (one per job, shared by its replicas).
	Root *corev1.ConfigMap
	// Secrets hold each VMI's cloud-init user data, by VMI index.
	Secrets []*corev1.Secret
	// DataVolumes are each VMI's root disk, by VMI index.
	DataVolumes []*cdiv1.DataVolume
	// Services: the headless Service of a multi-node replica, then the
	// Service of defaultHttpPort, each when there is one.
	Services []*corev1.Service
	// VMIs are the replica's VMIs, one per reserved node, by VMI index.
	VMIs []*virtv1.VirtualMachineInstance
	// Standalone are the DataVolumes of the job's standalone volumes
	// (BuildStandaloneVolume), in the order of spec.volumes. They are the
	// team's, not the job's: Objects leaves them out, SetOwner gives them
	// no owner, and the worker creates each only if it is missing
	// (standalone.go).
	Standalone []*cdiv1.DataVolume
}

// Objects lists the graph's objects in the order to apply them: the root,
// then what the VMIs need, then the VMIs. The standalone volumes
// (g.Standalone) are not the job's objects and are not listed.
func (g Graph) Objects() []Object {
	var out []Object
	if g.Root != nil {
		out = append(out, g.Root)
	}
	for _, o := range g.Secrets {
		out = append(out, o)
	}
	for _, o := range g.DataVolumes {
		out = append(out, o)
	}
	for _, o := range g.Services {
		out = append(out, o)
	}
	for _, o := range g.VMIs {
		out = append(out, o)
	}
	return out
}

// SetOwner makes root (the applied root ConfigMap, with its UID) the
// controller owner of every object of g but the root itself, so that
// deleting the root deletes the job's objects (foreground deletion waits
// for them: blockOwnerDeletion).
func (g Graph) SetOwner(root *corev1.ConfigMap) {
	ref := metav1.OwnerReference{
		APIVersion:         "v1",
		Kind:               "ConfigMap",
		Name:               root.Name,
		UID:                root.UID,
		Controller:         new(true),
		BlockOwnerDeletion: new(true),
	}
	for _, o := range g.Objects() {
		if o == Object(g.Root) {
			continue
		}
		o.SetOwnerReferences([]metav1.OwnerReference{ref})
	}
}

// Names of a job's objects. They are deterministic, DNS-1123 labels of at
// most 63 characters (the job ID is a 36-character UUID), so the worker
// finds a job's objects by name as well as by label.

// RootName is the name of a job's root ConfigMap: "cosmicac-job-<id>".
func RootName(jobID string) string { return "cosmicac-job-" + jobID }

// ReplicaName is the prefix of a replica's objects and the name of its
// headless Service: "cj-<id>-r<replica>".
func ReplicaName(jobID string, replica int) string {
	return "cj-" + jobID + "-r" + strconv.Itoa(replica)
}

// VMIName is the name of a replica's VMI, and of its DataVolume (and so
// of the PVC): "cj-<id>-r<replica>-<vmi index>".
func VMIName(jobID string, replica, index int) string {
	return ReplicaName(jobID, replica) + "-" + strconv.Itoa(index)
}

// SecretName is the name of a VMI's cloud-init Secret.
func SecretName(jobID string, replica, index int) string {
	return VMIName(jobID, replica, index) + "-cloudinit"
}

// HTTPServiceName is the name of a replica's defaultHttpPort Service.
func HTTPServiceName(jobID string, replica int) string {
	return ReplicaName(jobID, replica) + "-http"
}

// maxJobIDLen keeps every name within 63 characters: the longest is
// SecretName with a 3-digit replica and a 4-digit VMI index.
const maxJobIDLen = 63 - len("cj--r999-9999-cloudinit")

// SpecHash is a short hash of a job's spec (its JSON), recorded on every
// object so the worker can tell objects built from another spec.
func SpecHash(s cosmic.Spec) string {
	data, _ := json.Marshal(s) // a Spec always marshals
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// teamLabel is the team as a label value: the team itself when valid, else
// "h-" and a hash of it (the name then goes in AnnotationTeam).
func teamLabel(team string) (string, bool) {
	if len(validation.IsValidLabelValue(team)) == 0 && team != "" {
		return team, true
	}
	sum := sha256.Sum256([]byte(team))
	return "h-" + hex.EncodeToString(sum[:10]), false
}

func checkJobID(id string) error {
	if id == "" || len(id) > maxJobIDLen || len(validation.IsDNS1123Label(id)) > 0 {
		return &cosmic.FieldError{Field: "id", Message: fmt.Sprintf("%q cannot name Kubernetes objects (want a lowercase UUID)", id)}
	}
	return nil
}

// jobMeta is the metadata every object of the job shares.
func jobMeta(cfg RackConfig, job cosmic.Job, name string) metav1.ObjectMeta {
	team, ok := teamLabel(job.Team)
	m := metav1.ObjectMeta{
		Name:      name,
		Namespace: cfg.Namespace,
		Labels: map[string]string{
			LabelJob:       job.ID,
			LabelTeam:      team,
			LabelManagedBy: ManagedBy,
		},
		Annotations: map[string]string{AnnotationSpecHash: SpecHash(job.Spec)},
	}
	if !ok {
		m.Annotations[AnnotationTeam] = job.Team
	}
	if job.Spec.Name != "" {
		m.Annotations[AnnotationJobName] = job.Spec.Name
	}
	return m
}

// replicaMeta adds the replica label (and the VMI index, if index >= 0).
func replicaMeta(cfg RackConfig, job cosmic.Job, name string, replica, index int) metav1.ObjectMeta {
	m := jobMeta(cfg, job, name)
	m.Labels[LabelReplica] = strconv.Itoa(replica)
	if index >= 0 {
		m.Labels[LabelVMIIndex] = strconv.Itoa(index)
	}
	return m
}

// BuildRoot builds a job's root ConfigMap. It holds no secret: the job's
// identity and its spec hash, and, when the rack sizes the 64-bit PCI MMIO
// window, the hook script its VMIs' sidecar runs (HookScriptKey).
func BuildRoot(cfg RackConfig, job cosmic.Job) (*corev1.ConfigMap, error) {
	if err := checkJobID(job.ID); err != nil {
		return nil, fmt.Errorf("build root of job %s: %w", job.ID, err)
	}
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: jobMeta(cfg, job, RootName(job.ID)),
		Data:       rootData(cfg, job),
	}, nil
}

func rootData(cfg RackConfig, job cosmic.Job) map[string]string {
	d := map[string]string{
		"jobId":    job.ID,
		"type":     string(job.Spec.Type),
		"team":     job.Team,
		"user":     job.User,
		"rack":     cfg.Rack,
		"specHash": SpecHash(job.Spec),
	}
	if cfg.Firmware.PCIHole64GiB > 0 {
		d[HookScriptKey] = PCIHole64Hook(cfg.Firmware.PCIHole64GiB)
	}
	return d
}

// The boot contract the VMIs share with every rack that boots VMs
// (internal/vmboot): these names stay for the worker's importers.
type (
	// Bootstrap is what a replica's in-VM agents need (vmboot.Bootstrap).
	Bootstrap = vmboot.Bootstrap
	// AgentIdentity is one agent's key pair (vmboot.AgentIdentity).
	AgentIdentity = vmboot.AgentIdentity
	// Peer is a platform component an agent may talk to (vmboot.Peer).
	Peer = vmboot.Peer
	// AgentConfig is the file AgentConfigPath in each VMI (vmboot.AgentConfig).
	AgentConfig = vmboot.AgentConfig
)

// vmiPlan is what the builders need to know of one VMI.
type vmiPlan struct {
	index  int
	node   string
	gpus   []int
	cpu    int
	memGiB int
}

// BuildReplica builds the objects of one replica of job on the GPUs r
// reserves: per reserved node a cloud-init Secret, a DataVolume and a VMI; a
// headless Service when the replica spans nodes; a Service for
// defaultHttpPort when set; the DataVolume of each standalone volume the job
// mounts (Graph.Standalone), which its VMI attaches. It is pure and
// deterministic. A reservation that does not fit the job or the rack is an
// error (a *cosmic.FieldError per problem, joined), never a panic.
func BuildReplica(cfg RackConfig, job cosmic.Job, r cosmic.Reservation, boot Bootstrap) (Graph, error) {
	plan, gpu, image, err := planReplica(cfg, job, r)
	if err != nil {
		return Graph{}, fmt.Errorf("build replica %d of job %s: %w", r.Replica, job.ID, err)
	}
	root, err := BuildRoot(cfg, job)
	if err != nil {
		return Graph{}, err
	}
	g := Graph{Root: root, Standalone: buildStandaloneVolumes(cfg, job)}
	multi := len(plan) > 1
	var hosts []string
	if multi {
		svc := ReplicaName(job.ID, r.Replica)
		for _, p := range plan {
			hosts = append(hosts, fmt.Sprintf("%s.%s.%s.svc", VMIName(job.ID, r.Replica, p.index), svc, cfg.Namespace))
		}
		g.Services = append(g.Services, buildHeadlessService(cfg, job, r.Replica))
	}
	if job.Spec.DefaultHTTPPort != 0 {
		g.Services = append(g.Services, buildHTTPService(cfg, job, r.Replica))
	}
	for _, p := range plan {
		s, err := buildSecret(cfg, job, r.Replica, p, len(plan), hosts, boot)
		if err != nil {
			return Graph{}, fmt.Errorf("build replica %d of job %s: %w", r.Replica, job.ID, err)
		}
		g.Secrets = append(g.Secrets, s)
		g.DataVolumes = append(g.DataVolumes, buildDataVolume(cfg, job, r.Replica, p, image))
		g.VMIs = append(g.VMIs, buildVMI(cfg, job, r.Replica, p, gpu, multi))
	}
	return g, nil
}

// planReplica checks that r fits job and the rack, and splits the replica's
// CPU and memory over its VMIs in proportion to their GPUs.
func planReplica(cfg RackConfig, job cosmic.Job, r cosmic.Reservation) ([]vmiPlan, GPUResource, string, error) {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &cosmic.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	s := job.Spec
	if err := checkJobID(job.ID); err != nil {
		errs = append(errs, err)
	}
	if r.JobID != "" && r.JobID != job.ID {
		bad("reservation.jobId", "%s is not the job's ID %s", r.JobID, job.ID)
	}
	if r.Rack != "" && r.Rack != cfg.Rack {
		bad("reservation.rack", "%s is not this rack (%s)", r.Rack, cfg.Rack)
	}
	if r.Replica < 0 || r.Replica >= s.Replicas() || r.Replica > 999 {
		bad("reservation.replica", "%d: the job has replicas 0 to %d", r.Replica, s.Replicas()-1)
	}
	switch {
	case len(r.Nodes) == 0:
		bad("reservation.nodes", "is empty: a replica needs at least one node")
	case len(r.Nodes) > 1 && !s.MultiNode():
		bad("reservation.nodes", "%d nodes for one replica: only vLLM replicas may span nodes, this one needs exactly 1 VMI", len(r.Nodes))
	case len(r.Nodes) > 9999:
		bad("reservation.nodes", "%d nodes: at most 9999", len(r.Nodes))
	}
	seen := map[string]bool{}
	for i, n := range r.Nodes {
		f := fmt.Sprintf("reservation.nodes[%d]", i)
		switch {
		case n.Node == "" || len(validation.IsDNS1123Subdomain(n.Node)) > 0:
			bad(f+".node", "%q is not a node name", n.Node)
		case seen[n.Node]:
			bad(f+".node", "node %s is reserved twice for one replica", n.Node)
		}
		seen[n.Node] = true
		if len(n.GPUs) == 0 {
			bad(f+".gpus", "is empty: every VMI needs at least one GPU")
		}
		if len(n.GPUs) != len(r.Nodes[0].GPUs) {
			bad(f+".gpus", "%d GPUs: every node of a multi-node replica contributes the same number (%d on %s)", len(n.GPUs), len(r.Nodes[0].GPUs), r.Nodes[0].Node)
		}
	}
	if want := s.GPUsPerReplica(); r.Count() != want {
		bad("reservation.nodes", "reserves %d GPUs; the replica needs %d", r.Count(), want)
	}
	if len(r.Nodes) > 1 && (len(cfg.Networks.InfiniBand) == 0 || cfg.Networks.Overlay == "") {
		bad("reservation.nodes", "a replica on %d nodes needs the rack's networks.infiniband and networks.overlay, and the rack config names none", len(r.Nodes))
	}
	model := s.Resources.GPUModel
	if model == "" {
		model = cfg.GPUModel
	}
	gpu, ok := cfg.gpuForModel(model)
	if !ok {
		bad("spec.resources.gpuModel", "%q is not a GPU model of rack %s (gpuResources maps no resource to it)", model, cfg.Rack)
	}
	image := s.Image
	if image == "" && s.Type == cosmic.TypeManagedInference && s.Inference != nil {
		switch s.Inference.Runtime {
		case cosmic.RuntimeVLLM:
			image = cfg.Images.VLLM
		case cosmic.RuntimeParakeet:
			image = cfg.Images.Parakeet
		case cosmic.RuntimeLlamaCPP:
			image = cfg.Images.LlamaCPP
			if cfg.Images.EngineDisk == "" {
				bad("spec.inference.runtime", "rack %s serves no llama.cpp (its config has no images.engineDisk)", cfg.Rack)
			}
		}
	}
	if image == "" {
		bad("spec.image", "is empty and the rack has no default image for this job")
	}
	if s.DiskGB < 1 {
		bad("spec.diskGB", "%d: want at least 1 GiB", s.DiskGB)
	}
	if s.Type != cosmic.TypeGPUContainer {
		// One disk, attached to one VM: validation refuses these too.
		for i, v := range s.Volumes {
			if v.Source.Standalone != nil {
				bad(fmt.Sprintf("spec.volumes[%d].volumeSource.standalone", i), "a standalone volume is mounted by a %s job's one VM, not a %s job's", cosmic.TypeGPUContainer, s.Type)
			}
		}
	}
	if s.Resources.CPU < 0 || s.Resources.Memory < 0 {
		bad("spec.resources", "cpu and memory must not be negative")
	}
	if len(errs) > 0 {
		return nil, GPUResource{}, "", errors.Join(errs...)
	}

	// Each VMI is the node's share of the spec (cosmic.Spec.NodeShare, what
	// placement charged there less the rack's overhead); where the spec says
	// 0, the rack's per-GPU defaults.
	total := r.Count()
	plan := make([]vmiPlan, len(r.Nodes))
	for i, n := range r.Nodes {
		cpu, mem := s.NodeShare(len(n.GPUs), total)
		if cpu == 0 {
			cpu = cfg.PerGPU.CPU * len(n.GPUs)
		}
		if mem == 0 {
			mem = cfg.PerGPU.MemoryGB * len(n.GPUs)
		}
		plan[i] = vmiPlan{
			index:  i,
			node:   n.Node,
			gpus:   slices.Clone(n.GPUs),
			cpu:    max(1, cpu),
			memGiB: max(1, mem),
		}
	}
	return plan, gpu, registryURL(image), nil
}

// registryURL is image as CDI's registry source URL.
func registryURL(image string) string {
	if strings.Contains(image, "://") {
		return image
	}
	return "docker://" + image
}

func buildDataVolume(cfg RackConfig, job cosmic.Job, replica int, p vmiPlan, url string) *cdiv1.DataVolume {
	m := replicaMeta(cfg, job, VMIName(job.ID, replica, p.index), replica, p.index)
	m.Annotations[AnnotationCDIDeleteAfterCompletion] = "false"
	st := &cdiv1.StorageSpec{
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceStorage: *resource.NewQuantity(int64(job.Spec.DiskGB)<<30, resource.BinarySI),
		}},
	}
	if cfg.StorageClassName != "" {
		st.StorageClassName = new(cfg.StorageClassName)
	}
	return &cdiv1.DataVolume{
		TypeMeta:   metav1.TypeMeta{APIVersion: cdiv1.SchemeGroupVersion.String(), Kind: "DataVolume"},
		ObjectMeta: m,
		Spec: cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: new(url)}},
			Storage: st,
		},
	}
}

func buildVMI(cfg RackConfig, job cosmic.Job, replica int, p vmiPlan, gpu GPUResource, multi bool) *virtv1.VirtualMachineInstance {
	name := VMIName(job.ID, replica, p.index)
	m := replicaMeta(cfg, job, name, replica, p.index)
	m.Annotations[AnnotationNode] = p.node
	m.Annotations[AnnotationGPUs] = joinInts(p.gpus)
	if multi {
		m.Labels[LabelRole] = RoleWorker
		if p.index == 0 {
			m.Labels[LabelRole] = RoleHead
		}
	}

	gpus := make([]virtv1.GPU, len(p.gpus))
	for i := range gpus {
		gpus[i] = virtv1.GPU{Name: "gpu" + strconv.Itoa(i), DeviceName: gpu.deviceName()}
	}
	mem := resource.NewQuantity(int64(p.memGiB)<<30, resource.BinarySI)
	networks := []virtv1.Network{{Name: podNetwork, NetworkSource: virtv1.NetworkSource{Pod: &virtv1.PodNetwork{}}}}
	ifaces := []virtv1.Interface{{Name: podNetwork, InterfaceBindingMethod: virtv1.InterfaceBindingMethod{Masquerade: &virtv1.InterfaceMasquerade{}}}}
	if multi {
		networks = append(networks, virtv1.Network{Name: overlayNet, NetworkSource: virtv1.NetworkSource{Multus: &virtv1.MultusNetwork{NetworkName: cfg.nadRef(cfg.Networks.Overlay)}}})
		ifaces = append(ifaces, virtv1.Interface{Name: overlayNet, InterfaceBindingMethod: virtv1.InterfaceBindingMethod{Bridge: &virtv1.InterfaceBridge{}}})
		for i, nad := range cfg.Networks.InfiniBand {
			n := "ib" + strconv.Itoa(i)
			networks = append(networks, virtv1.Network{Name: n, NetworkSource: virtv1.NetworkSource{Multus: &virtv1.MultusNetwork{NetworkName: cfg.nadRef(nad)}}})
			ifaces = append(ifaces, virtv1.Interface{Name: n, InterfaceBindingMethod: virtv1.InterfaceBindingMethod{SRIOV: &virtv1.InterfaceSRIOV{}}})
		}
	}

	disks := []virtv1.Disk{
		{Name: rootDisk, DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}}, BootOrder: new(uint(1))},
		{Name: cloudInitDisk, DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}}},
	}
	volumes := []virtv1.Volume{
		{Name: rootDisk, VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: name}}},
		{Name: cloudInitDisk, VolumeSource: virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{
			UserDataSecretRef: &corev1.LocalObjectReference{Name: SecretName(job.ID, replica, p.index)},
		}}},
	}
	if cfg.AgentDelivery == vmboot.DeliveryDisk {
		// The agent disk (vmboot.AgentDisk): a read-only SATA CD-ROM (a
		// CD-ROM cannot be virtio), as KubeVirt attaches its virtio-win
		// containerDisk.
		disks = append(disks, virtv1.Disk{Name: agentDisk, DiskDevice: virtv1.DiskDevice{CDRom: &virtv1.CDRomTarget{Bus: virtv1.DiskBusSATA, ReadOnly: new(true)}}})
		volumes = append(volumes, virtv1.Volume{Name: agentDisk, VolumeSource: virtv1.VolumeSource{ContainerDisk: &virtv1.ContainerDiskSource{Image: cfg.Images.AgentDisk}}})
	}
	if needsEngine(cfg, job) {
		// The llama.cpp runtime's engine and models (vmboot.EngineDisk): a
		// read-only SATA CD-ROM from a containerDisk, as the agent disk.
		disks = append(disks, virtv1.Disk{Name: engineDisk, DiskDevice: virtv1.DiskDevice{CDRom: &virtv1.CDRomTarget{Bus: virtv1.DiskBusSATA, ReadOnly: new(true)}}})
		volumes = append(volumes, virtv1.Volume{Name: engineDisk, VolumeSource: virtv1.VolumeSource{ContainerDisk: &virtv1.ContainerDiskSource{Image: cfg.Images.EngineDisk}}})
	}
	if s, v := standaloneDisks(job); len(s) > 0 {
		// The job's standalone volumes, each a virtio disk with the
		// serial the agent finds it by (standalone.go).
		disks = append(disks, s...)
		volumes = append(volumes, v...)
	}
	if needsNGCKey(cfg, job) {
		// The rack's NGC key, for the NIM only: a config disk KubeVirt
		// makes from the Secret (an ISO with a file per data key), found by
		// its label (vmboot.NGCKeyDisk).
		disks = append(disks, virtv1.Disk{Name: ngcKeyDisk, DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio, ReadOnly: true}}})
		volumes = append(volumes, virtv1.Volume{Name: ngcKeyDisk, VolumeSource: virtv1.VolumeSource{Secret: &virtv1.SecretVolumeSource{
			SecretName: cfg.NGCKeySecret, VolumeLabel: vmboot.NGCKeyLabel}}})
	}
	spec := virtv1.VirtualMachineInstanceSpec{
		Domain: virtv1.DomainSpec{
			CPU:    &virtv1.CPU{Sockets: 1, Cores: uint32(p.cpu), Threads: 1},
			Memory: &virtv1.Memory{Guest: mem},
			Resources: virtv1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewQuantity(int64(p.cpu), resource.DecimalSI),
				corev1.ResourceMemory: *mem,
			}},
			Devices: virtv1.Devices{
				Disks:      disks,
				GPUs:       gpus,
				Interfaces: ifaces,
			},
			Firmware: &virtv1.Firmware{Bootloader: &virtv1.Bootloader{EFI: &virtv1.EFI{SecureBoot: new(cfg.Firmware.SecureBoot)}}},
		},
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{p.node}}},
			}}},
		}},
		Tolerations:      slices.Clone(cfg.Tolerations),
		EvictionStrategy: new(virtv1.EvictionStrategyNone),
		Hostname:         name,
		Networks:         networks,
		Volumes:          volumes,
	}
	if multi {
		spec.Subdomain = ReplicaName(job.ID, replica)
	}
	if job.Spec.PushesVolumes() {
		// The agent pushes the job's RW volumes as the VM powers off
		// (docs/data.md): virt-launcher waits this long for the guest.
		spec.TerminationGracePeriodSeconds = new(int64(vmboot.StopPushWait / time.Second))
	}
	if cfg.Firmware.SecureBoot {
		spec.Domain.Features = &virtv1.Features{SMM: &virtv1.FeatureState{Enabled: new(true)}}
	}
	if cfg.Firmware.PCIHole64GiB > 0 {
		m.Annotations[AnnotationHookSidecars] = hookSidecars(cfg, job.ID)
	}
	return &virtv1.VirtualMachineInstance{
		TypeMeta:   metav1.TypeMeta{APIVersion: virtv1.GroupVersion.String(), Kind: "VirtualMachineInstance"},
		ObjectMeta: m,
		Spec:       spec,
	}
}

// buildHeadlessService lets a multi-node replica's VMIs find each other by
// name (<vmi>.<replica>.<namespace>.svc) before they are ready.
func buildHeadlessService(cfg RackConfig, job cosmic.Job, replica int) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: replicaMeta(cfg, job, ReplicaName(job.ID, replica), replica, -1),
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 map[string]string{LabelJob: job.ID, LabelReplica: strconv.Itoa(replica)},
		},
	}
}

// buildHTTPService exposes defaultHttpPort of the replica's VMI 0 (the head)
// inside the cluster.
func buildHTTPService(cfg RackConfig, job cosmic.Job, replica int) *corev1.Service {
	port := int32(job.Spec.DefaultHTTPPort)
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: replicaMeta(cfg, job, HTTPServiceName(job.ID, replica), replica, -1),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: map[string]string{LabelJob: job.ID, LabelReplica: strconv.Itoa(replica), LabelVMIIndex: "0"},
			Ports: []corev1.ServicePort{{
				Name:       "http",
				Protocol:   corev1.ProtocolTCP,
				Port:       port,
				TargetPort: intstr.FromInt32(port),
			}},
		},
	}
}

func buildSecret(cfg RackConfig, job cosmic.Job, replica int, p vmiPlan, count int, hosts []string, boot Bootstrap) (*corev1.Secret, error) {
	ud, err := UserData(cfg, job, replica, p.index, count, len(p.gpus), hosts, boot)
	if err != nil {
		return nil, err
	}
	meta := replicaMeta(cfg, job, SecretName(job.ID, replica, p.index), replica, p.index)
	if p.index < len(boot.Agents) && boot.Agents[p.index].PublicKey != "" {
		meta.Annotations[AnnotationAgentKey] = boot.Agents[p.index].PublicKey
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: meta,
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{UserDataKey: ud},
	}, nil
}

// UserData is the cloud-init user data of VMI index (of count, with gpus
// GPUs) of a replica: vmboot.UserData of that VM, with the rack's agent
// delivery (RackConfig.AgentDelivery, AgentPath).
func UserData(cfg RackConfig, job cosmic.Job, replica, index, count, gpus int, hosts []string, boot Bootstrap) ([]byte, error) {
	return vmboot.UserData(bootVM(cfg, job, replica, index, count, gpus, hosts, boot))
}

// bootVM is what vmboot needs to know of one VMI.
func bootVM(cfg RackConfig, job cosmic.Job, replica, index, count, gpus int, hosts []string, boot Bootstrap) vmboot.VM {
	return vmboot.VM{
		Job: job, Replica: replica, Index: index, Count: count, GPUs: gpus, Hosts: hosts, Boot: boot,
		Agent: cfg.agent(), NGCKey: needsNGCKey(cfg, job), Engine: needsEngine(cfg, job),
	}
}

// needsEngine says job's VMIs get the engine disk: a llama.cpp job on a
// rack that has one.
func needsEngine(cfg RackConfig, job cosmic.Job) bool {
	in := job.Spec.Inference
	return cfg.Images.EngineDisk != "" && job.Spec.Type == cosmic.TypeManagedInference && in != nil && in.Runtime == cosmic.RuntimeLlamaCPP
}

// needsNGCKey says whether the job's VMIs get the rack's NGC key: those of
// a parakeet job, on a rack that has one.
func needsNGCKey(cfg RackConfig, job cosmic.Job) bool {
	in := job.Spec.Inference
	return cfg.NGCKeySecret != "" && job.Spec.Type == cosmic.TypeManagedInference && in != nil && in.Runtime == cosmic.RuntimeParakeet
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
