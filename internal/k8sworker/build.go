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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/cosmicac/cosmicac/internal/cosmic"
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

// Paths inside the VM and the Secret key of the cloud-init user data.
const (
	UserDataKey     = "userdata"
	AgentConfigPath = "/etc/cosmicac/agent.yaml"
	EnvFilePath     = "/etc/cosmicac/env"
	AgentUnitPath   = "/etc/systemd/system/cosmicac-agent.service"
)

// Names of the fixed VMI devices, networks and volumes.
const (
	rootDisk      = "rootdisk"
	cloudInitDisk = "cloudinitdisk"
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
}

// Objects lists the graph's objects in the order to apply them: the root,
// then what the VMIs need, then the VMIs.
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
// identity and its spec hash.
func BuildRoot(cfg RackConfig, job cosmic.Job) (*corev1.ConfigMap, error) {
	if err := checkJobID(job.ID); err != nil {
		return nil, fmt.Errorf("build root of job %s: %w", job.ID, err)
	}
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: jobMeta(cfg, job, RootName(job.ID)),
		Data: map[string]string{
			"jobId":    job.ID,
			"type":     string(job.Spec.Type),
			"team":     job.Team,
			"user":     job.User,
			"rack":     cfg.Rack,
			"specHash": SpecHash(job.Spec),
		},
	}, nil
}

// Bootstrap is what a replica's in-VM agents need from the platform
// (issue 7): each VMI's own identity and the peers it may talk to. The
// worker fills it; an empty Bootstrap leaves those out of the user data.
type Bootstrap struct {
	// Agents holds each VMI's agent identity, by VMI index.
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

// AgentConfig is the file AgentConfigPath in each VMI: what the agent
// (`cosmicac agent instance|inference --config FILE`) is told. The agent
// imports no k8s.io, so it keeps its own copy of this shape.
type AgentConfig struct {
	JobID    string         `json:"jobId"`
	JobType  cosmic.JobType `json:"jobType"`
	Team     string         `json:"team"`
	Replica  int            `json:"replica"`
	VMIIndex int            `json:"vmiIndex"`
	VMICount int            `json:"vmiCount"`
	// GPUs is the number of GPUs passed through to this VMI.
	GPUs int `json:"gpus"`
	// Hosts are the DNS names of the replica's VMIs, by VMI index (on the
	// replica's headless Service), for a multi-node replica.
	Hosts []string `json:"hosts,omitempty"`
	// Identity is this VMI's agent identity, when the worker gave one.
	Identity *AgentIdentity `json:"identity,omitempty"`
	Peers    []Peer         `json:"peers,omitempty"`
	// Command is the job's command (gpu-container), run with EnvFile.
	Command  []string `json:"command,omitempty"`
	EnvFile  string   `json:"envFile"`
	HTTPPort int      `json:"httpPort,omitempty"`
	GRPCPort int      `json:"grpcPort,omitempty"`
	// Inference is the model to serve (managed-inference).
	Inference *cosmic.InferenceSpec `json:"inference,omitempty"`
}

// vmiPlan is what the builders need to know of one VMI.
type vmiPlan struct {
	index  int
	node   string
	gpus   []int
	cpu    int
	memGiB int
}

// BuildReplica builds the objects of one replica of job on the GPUs r
// reserves: per reserved node a cloud-init Secret, a DataVolume and a VMI;
// a headless Service when the replica spans nodes; a Service for
// defaultHttpPort when set. It is pure and deterministic. A reservation that
// does not fit the job or the rack is an error (a *cosmic.FieldError per
// problem, joined), never a panic.
func BuildReplica(cfg RackConfig, job cosmic.Job, r cosmic.Reservation, boot Bootstrap) (Graph, error) {
	plan, gpu, image, err := planReplica(cfg, job, r)
	if err != nil {
		return Graph{}, fmt.Errorf("build replica %d of job %s: %w", r.Replica, job.ID, err)
	}
	root, err := BuildRoot(cfg, job)
	if err != nil {
		return Graph{}, err
	}
	g := Graph{Root: root}
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
		}
	}
	if image == "" {
		bad("spec.image", "is empty and the rack has no default image for this job")
	}
	if s.DiskGB < 1 {
		bad("spec.diskGB", "%d: want at least 1 GiB", s.DiskGB)
	}
	if s.Resources.CPU < 0 || s.Resources.Memory < 0 {
		bad("spec.resources", "cpu and memory must not be negative")
	}
	if len(errs) > 0 {
		return nil, GPUResource{}, "", errors.Join(errs...)
	}

	total := r.Count()
	cpu, mem := s.Resources.CPU, s.Resources.Memory
	if cpu == 0 {
		cpu = cfg.PerGPU.CPU * total
	}
	if mem == 0 {
		mem = cfg.PerGPU.MemoryGB * total
	}
	plan := make([]vmiPlan, len(r.Nodes))
	for i, n := range r.Nodes {
		plan[i] = vmiPlan{
			index:  i,
			node:   n.Node,
			gpus:   slices.Clone(n.GPUs),
			cpu:    max(1, cpu*len(n.GPUs)/total),
			memGiB: max(1, mem*len(n.GPUs)/total),
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

	spec := virtv1.VirtualMachineInstanceSpec{
		Domain: virtv1.DomainSpec{
			CPU:    &virtv1.CPU{Sockets: 1, Cores: uint32(p.cpu), Threads: 1},
			Memory: &virtv1.Memory{Guest: mem},
			Resources: virtv1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewQuantity(int64(p.cpu), resource.DecimalSI),
				corev1.ResourceMemory: *mem,
			}},
			Devices: virtv1.Devices{
				Disks: []virtv1.Disk{
					{Name: rootDisk, DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}}, BootOrder: new(uint(1))},
					{Name: cloudInitDisk, DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}}},
				},
				GPUs:       gpus,
				Interfaces: ifaces,
			},
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
		Volumes: []virtv1.Volume{
			{Name: rootDisk, VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: name}}},
			{Name: cloudInitDisk, VolumeSource: virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{
				UserDataSecretRef: &corev1.LocalObjectReference{Name: SecretName(job.ID, replica, p.index)},
			}}},
		},
	}
	if multi {
		spec.Subdomain = ReplicaName(job.ID, replica)
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

// cloudConfig is the #cloud-config user data of a VMI.
type cloudConfig struct {
	Users             []string    `json:"users"`
	SSHAuthorizedKeys []string    `json:"ssh_authorized_keys,omitempty"`
	WriteFiles        []cloudFile `json:"write_files"`
	RunCmd            [][]string  `json:"runcmd"`
}

type cloudFile struct {
	Path        string `json:"path"`
	Owner       string `json:"owner"`
	Permissions string `json:"permissions"`
	Content     string `json:"content"`
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

// peersFor is the peers an agent of a job of type typ is told about: only
// an inference agent has business with proxy-inference.
func peersFor(typ cosmic.JobType, peers []Peer) []Peer {
	if typ == cosmic.TypeManagedInference {
		return peers
	}
	return slices.DeleteFunc(slices.Clone(peers), func(p Peer) bool { return p.Role == "proxy-inference" })
}

// UserData is the cloud-init user data of VMI index (of count, with gpus
// GPUs) of a replica: the default user with the spec's SSH keys, the agent's
// config at AgentConfigPath, the job's environment at EnvFilePath, and a
// systemd unit that starts the agent (`cosmicac agent instance` or
// `cosmicac agent inference`, by job type) at every boot.
func UserData(cfg RackConfig, job cosmic.Job, replica, index, count, gpus int, hosts []string, boot Bootstrap) ([]byte, error) {
	ac := AgentConfig{
		JobID:    job.ID,
		JobType:  job.Spec.Type,
		Team:     job.Team,
		Replica:  replica,
		VMIIndex: index,
		VMICount: count,
		GPUs:     gpus,
		Hosts:    hosts,
		Peers:    peersFor(job.Spec.Type, boot.Peers),
		Command:  job.Spec.Command,
		EnvFile:  EnvFilePath,
		HTTPPort: job.Spec.DefaultHTTPPort,
		GRPCPort: job.Spec.GRPCPort,
	}
	if index < len(boot.Agents) && boot.Agents[index] != (AgentIdentity{}) {
		id := boot.Agents[index]
		ac.Identity = &id
	}
	mode := "instance"
	if job.Spec.Type == cosmic.TypeManagedInference {
		mode = "inference"
		ac.Inference = job.Spec.Inference
	}
	agentYAML, err := yaml.Marshal(ac)
	if err != nil {
		return nil, fmt.Errorf("encode agent config: %w", err)
	}
	unit := strings.Join([]string{
		"[Unit]",
		"Description=CosmicAC " + mode + " agent",
		"Wants=network-online.target",
		"After=network-online.target",
		"",
		"[Service]",
		"ExecStart=" + cfg.AgentPath + " agent " + mode + " --config " + AgentConfigPath,
		"Restart=always",
		"RestartSec=2",
		"",
		"[Install]",
		"WantedBy=multi-user.target",
		"",
	}, "\n")
	cc := cloudConfig{
		Users:             []string{"default"},
		SSHAuthorizedKeys: job.Spec.SSHPublicKeys,
		WriteFiles: []cloudFile{
			{Path: AgentConfigPath, Owner: "root:root", Permissions: "0600", Content: string(agentYAML)},
			{Path: EnvFilePath, Owner: "root:root", Permissions: "0600", Content: envFile(job, replica, index)},
			{Path: AgentUnitPath, Owner: "root:root", Permissions: "0644", Content: unit},
		},
		RunCmd: [][]string{
			{"systemctl", "daemon-reload"},
			{"systemctl", "enable", "--now", "cosmicac-agent.service"},
		},
	}
	body, err := yaml.Marshal(cc)
	if err != nil {
		return nil, fmt.Errorf("encode cloud-config: %w", err)
	}
	return append([]byte("#cloud-config\n"), body...), nil
}

// envFile is the job's environment: the platform's COSMICAC_ variables,
// then spec.envVars in order, one NAME='value' a line (POSIX shell quoting,
// so `set -a; . FILE` reads it back).
func envFile(job cosmic.Job, replica, index int) string {
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

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
