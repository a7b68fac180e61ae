package k8sworker

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/vmboot"
)

// RackConfig is the configuration of one Kubernetes rack: where it is listed,
// where its objects live in the cluster, how GPUs are named there, and the
// defaults the builders fill in. Start from DefaultRackConfig; Validate
// reports every problem at once.
type RackConfig struct {
	// Rack is the rack's ID, as registered with the ork.
	Rack string `json:"rack"`
	// Location is the location the rack is listed under.
	Location string `json:"location"`
	// GPUModel is the model the rack is registered with; a job that leaves
	// resources.gpuModel empty gets it.
	GPUModel string `json:"gpuModel"`
	// Namespace holds every object of the rack's jobs.
	Namespace string `json:"namespace"`
	// StorageClassName is the storage class of the root disks; empty means
	// the cluster's default class.
	StorageClassName string `json:"storageClassName,omitempty"`
	// GPUResources maps the nodes' extended resources to GPU models. Empty
	// means every allocatable "nvidia.com/NAME" resource (but the generic
	// "nvidia.com/gpu" and MIG slices "nvidia.com/mig-…") is a GPU of model
	// NAME, passed through by that name.
	GPUResources []GPUResource `json:"gpuResources,omitempty"`
	// Networks are the extra networks of multi-node replicas.
	Networks Networks `json:"networks"`
	// Images are the default root disk images by runtime, for inference jobs
	// that name no image.
	Images Images `json:"images"`
	// PerGPU is the CPU and memory a VMI gets per GPU when the spec does not
	// say (spec.resources.cpu or memory is 0).
	PerGPU PerGPU `json:"perGPU"`
	// Client is the client-go rate limit towards the apiserver.
	Client ClientConfig `json:"client"`
	// DriftPolicy says what to do when a VMI of a running job disappears
	// behind the worker's back: recreate it, or fail the replica.
	DriftPolicy DriftPolicy `json:"driftPolicy"`
	// ImportRestartLimit is how many times CDI may restart a root disk
	// import (its importer pod) before the replica fails with
	// import_failed. CDI retries a bad image forever.
	ImportRestartLimit int `json:"importRestartLimit"`
	// UnschedulableGrace is how long a VMI may stay unschedulable before
	// its replica fails with vmi_unschedulable (GPUs of a replaced VMI can
	// take a moment to be released). Zero fails at once.
	UnschedulableGrace config.Duration `json:"unschedulableGrace"`
	// Tolerations are added to every VMI (GPU nodes are often tainted).
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// AgentDelivery is how the agent reaches the VMs: "disk" (the default)
	// attaches the agent disk (Images.AgentDisk, a containerDisk of the
	// ISO hack/agent-disk.sh builds) as a read-only CD-ROM and runs the
	// agent from it, so any cloud image with cloud-init works; "image"
	// runs the agent the image carries at AgentPath.
	AgentDelivery vmboot.Delivery `json:"agentDelivery"`
	// AgentPath is the path of the cosmicac binary inside the VM images
	// (AgentDelivery image).
	AgentPath string `json:"agentPath"`
	// NGCKeySecret names a Secret in the rack's namespace holding the NGC
	// API key the parakeet runtime (NVIDIA's ASR NIM) needs to download its
	// model, under data "ngc-api-key". Each parakeet VMI gets it as a
	// config disk (vmboot.NGCKeyDisk), copied to a root-only file on /run
	// before the agent starts; no other job's VMI sees it. "": none (a NIM
	// whose cache holds its model).
	NGCKeySecret string `json:"ngcKeySecret,omitempty"`
	// Firmware is how the VMIs boot: UEFI, and the 64-bit PCI MMIO window
	// large-BAR GPUs need.
	Firmware Firmware `json:"firmware"`
	// Peers are the platform peers each VMI's agent is told about, admits
	// and dials: the agents' directory (role directory), the app-nodes that
	// relay shells (app-node), the monitor (monitor). The worker adds
	// itself (role worker) when it serves agents (ServeAgents). Their
	// addresses must be reachable from the pod network.
	Peers []Peer `json:"peers,omitempty"`
	// RequireAgent lists the job types whose replicas are running only once
	// the agent of every VMI has reported ready (when the worker serves
	// agents; without ServeAgents no agent can report, and VMI readiness
	// alone decides).
	RequireAgent []cosmic.JobType `json:"requireAgent"`
	// AgentTimeout is how long an agent may go without reporting before
	// its last report no longer counts (agents report every 10 s).
	AgentTimeout config.Duration `json:"agentTimeout"`
}

// GPUResource maps one extended resource of the nodes to a GPU model.
type GPUResource struct {
	// Resource is the extended resource name, e.g. "nvidia.com/GH100_H100_SXM5_80GB".
	Resource string `json:"resource"`
	// Model is the GPU model; empty means the resource name after its
	// "vendor/" prefix.
	Model string `json:"model,omitempty"`
	// DeviceName is the KubeVirt deviceName of the GPU
	// (spec.domain.devices.gpus[].deviceName, as permitted in the KubeVirt
	// CR's permittedHostDevices); empty means Resource.
	DeviceName string `json:"deviceName,omitempty"`
}

// Networks are the Multus NetworkAttachmentDefinitions a multi-node replica's
// VMIs attach to besides the pod network, as "name" (in Namespace) or
// "namespace/name".
type Networks struct {
	// InfiniBand lists the SR-IOV InfiniBand NADs, one VMI interface each.
	InfiniBand []string `json:"infiniband,omitempty"`
	// Overlay is the OVS/VXLAN overlay NAD, bridged into the VMI.
	Overlay string `json:"overlay,omitempty"`
}

// Images are the default root disk images (registry references, without
// "docker://"), and the agent disk's containerDisk.
type Images struct {
	VLLM     string `json:"vllm"`
	Parakeet string `json:"parakeet"`
	// AgentDisk is the containerDisk image holding the agent disk (an ISO
	// 9660 file labelled COSMICAC under /disk/, deploy/agent-disk.Containerfile),
	// for AgentDelivery disk. Use the tag of the platform's version: the
	// agent must speak the platform's protocol.
	AgentDisk string `json:"agentDisk"`
	// LlamaCPP and EngineDisk make the rack serve the llama.cpp runtime
	// (both, or neither): LlamaCPP is the root disk image of its VMs (any
	// cloud image: llama-server is static), EngineDisk the containerDisk
	// holding the engine disk (an ISO 9660 file labelled CACENGINE under
	// /disk/ with llama-server and models/ORG/NAME.gguf: hack/engine-disk.sh,
	// deploy/engine-disk.Containerfile), attached to each llama.cpp VMI
	// as a read-only CD-ROM (vmboot.EngineDisk).
	LlamaCPP   string `json:"llamaCPP,omitempty"`
	EngineDisk string `json:"engineDisk,omitempty"`
}

// Firmware is the VMIs' firmware. They always boot UEFI
// (spec.domain.firmware.bootloader.efi): the cloud images the platform
// supports (Ubuntu 22.04/24.04, Debian 12/13) boot either way, and GPU
// servers boot UEFI.
type Firmware struct {
	// SecureBoot enables UEFI Secure Boot (and SMM, which it requires).
	// Off by default: the NVIDIA driver's kernel modules of most images
	// are not signed for it.
	SecureBoot bool `json:"secureBoot"`
	// PCIHole64GiB, when above 0, sizes the guest's 64-bit PCI MMIO window
	// of VMIs with GPUs (an H100 has an 80 GiB BAR; 8 of them need more
	// than 640 GiB). KubeVirt has no field for it (only the annotation
	// kubevirt.io/disablePCIHole64): the worker sets it with a KubeVirt hook
	// sidecar (needs the Sidecar feature gate) that adds
	// <pcihole64> to the pcie-root controller and OVMF's
	// opt/ovmf/X-PciMmio64Mb to the domain. 0 leaves it to the firmware.
	PCIHole64GiB int `json:"pciHole64GiB,omitempty"`
	// HookSidecarImage is the image of the hook sidecar; empty means
	// KubeVirt's own sidecar-shim (virt-operator's default).
	HookSidecarImage string `json:"hookSidecarImage,omitempty"`
}

// PerGPU is the CPU (vCPUs) and memory (GiB) per GPU.
type PerGPU struct {
	CPU      int `json:"cpu"`
	MemoryGB int `json:"memoryGB"`
}

// ClientConfig is the client-go rate limit.
type ClientConfig struct {
	QPS   float32 `json:"qps"`
	Burst int     `json:"burst"`
}

// DriftPolicy is what the worker does with a VMI deleted behind its back.
type DriftPolicy string

// The drift policies.
const (
	DriftRecreate DriftPolicy = "recreate"
	DriftFail     DriftPolicy = "fail"
)

// Defaults of a RackConfig.
const (
	DefaultNamespace          = "cosmicac"
	DefaultQPS                = 50
	DefaultBurst              = 100
	DefaultImportRestartLimit = 3
	DefaultUnschedulableGrace = time.Minute
	DefaultAgentPath          = vmboot.DefaultAgentPath
	DefaultAgentDiskImage     = "ghcr.io/cosmicac/cosmicac-agent-disk:latest"
	MaxPCIHole64GiB           = 65536 // 64 TiB
	DefaultVLLMImage          = "ghcr.io/cosmicac/vm-vllm:latest"
	DefaultParakeetImage      = "ghcr.io/cosmicac/vm-parakeet:latest"
	defaultRack               = "k8s-us-1"
	defaultLocation           = "us"
	defaultGPUModel           = "GH100_H100_SXM5_80GB"
)

// DefaultRackConfig is a rack k8s-us-1 in us with GH100_H100_SXM5_80GB GPUs
// found by their resource names, objects in namespace cosmicac, the agent
// from the agent disk, UEFI without Secure Boot, the
// cluster's default storage class, no extra networks, 8 vCPUs and 64 GiB
// per GPU, 50 QPS (burst 100) and drift repaired by recreating the VMI.
func DefaultRackConfig() RackConfig {
	return RackConfig{
		Rack:               defaultRack,
		Location:           defaultLocation,
		GPUModel:           defaultGPUModel,
		Namespace:          DefaultNamespace,
		Images:             Images{VLLM: DefaultVLLMImage, Parakeet: DefaultParakeetImage, AgentDisk: DefaultAgentDiskImage},
		PerGPU:             PerGPU{CPU: cosmic.DefaultCPUPerGPU, MemoryGB: cosmic.DefaultMemoryPerGPU},
		Client:             ClientConfig{QPS: DefaultQPS, Burst: DefaultBurst},
		DriftPolicy:        DriftRecreate,
		ImportRestartLimit: DefaultImportRestartLimit,
		UnschedulableGrace: config.Duration(DefaultUnschedulableGrace),
		AgentDelivery:      vmboot.DeliveryDisk,
		AgentPath:          DefaultAgentPath,
		RequireAgent:       []cosmic.JobType{cosmic.TypeGPUContainer, cosmic.TypeManagedInference},
		AgentTimeout:       config.Duration(DefaultAgentTimeout),
	}
}

// DefaultAgentTimeout is three missed agent reports and some slack.
const DefaultAgentTimeout = 35 * time.Second

// Peer roles an agent's bootstrap may name (agent.Role*, inferagent's).
var peerRoles = []string{"ork", "directory", "worker", "app-node", "monitor", "proxy-inference"}

// ParseRackConfig reads a YAML (or JSON) config over DefaultRackConfig,
// strictly (unknown fields are errors), and validates it.
func ParseRackConfig(data []byte) (RackConfig, error) {
	c := DefaultRackConfig()
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return RackConfig{}, fmt.Errorf("parse rack config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return RackConfig{}, fmt.Errorf("rack config: %w", err)
	}
	return c, nil
}

// Bounds of a RackConfig.
const (
	MaxQPS       = 10000
	MaxPerGPUCPU = 512
	MaxPerGPUMem = 8192 // GiB
)

var imageRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9._/:@]*[A-Za-z0-9_])?$`)

// Validate reports every problem of the config at once, each a
// *cosmic.FieldError naming the field by its YAML path.
func (c RackConfig) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &cosmic.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	rack := cosmic.Rack{ID: c.Rack, Type: cosmic.RackTypeServer, Location: c.Location, GPUModel: c.GPUModel}
	for _, fe := range cosmic.FieldErrors(rack.Validate()) {
		switch fe.Field {
		case "id":
			bad("rack", "%s", fe.Message)
		case "location", "gpuModel":
			bad(fe.Field, "%s", fe.Message)
		}
	}
	for _, m := range validation.IsDNS1123Label(c.Namespace) {
		bad("namespace", "%q: %s", c.Namespace, m)
	}
	if c.StorageClassName != "" {
		for _, m := range validation.IsDNS1123Subdomain(c.StorageClassName) {
			bad("storageClassName", "%q: %s", c.StorageClassName, m)
		}
	}
	resources, models := map[string]bool{}, map[string]bool{}
	for i, g := range c.GPUResources {
		f := fmt.Sprintf("gpuResources[%d]", i)
		_, _, resOK := strings.Cut(g.Resource, "/")
		if !resOK {
			bad(f+".resource", "%q is not an extended resource name (want vendor/name, e.g. nvidia.com/GH100_H100_SXM5_80GB)", g.Resource)
		} else {
			for _, m := range validation.IsQualifiedName(g.Resource) {
				bad(f+".resource", "%q: %s", g.Resource, m)
			}
		}
		if resources[g.Resource] {
			bad(f+".resource", "%q is mapped twice", g.Resource)
		}
		resources[g.Resource] = true
		model := g.model()
		if !cosmic.ValidGPUModel(model) && (resOK || g.Model != "") {
			bad(f+".model", "%q is not a valid GPU model name", model)
		}
		if models[model] {
			bad(f+".model", "model %s is mapped from two resources", model)
		}
		models[model] = true
		if g.DeviceName != "" {
			for _, m := range validation.IsQualifiedName(g.DeviceName) {
				bad(f+".deviceName", "%q: %s", g.DeviceName, m)
			}
		}
	}
	if len(c.GPUResources) > 0 && cosmic.ValidGPUModel(c.GPUModel) && !models[c.GPUModel] {
		bad("gpuModel", "%s is not the model of any of gpuResources", c.GPUModel)
	}
	for i, n := range c.Networks.InfiniBand {
		c.checkNAD(bad, fmt.Sprintf("networks.infiniband[%d]", i), n)
	}
	if c.Networks.Overlay != "" {
		c.checkNAD(bad, "networks.overlay", c.Networks.Overlay)
	}
	if (len(c.Networks.InfiniBand) == 0) != (c.Networks.Overlay == "") {
		bad("networks", "set both infiniband and overlay (multi-node vLLM replicas need both) or neither")
	}
	if c.NGCKeySecret != "" {
		for _, m := range validation.IsDNS1123Subdomain(c.NGCKeySecret) {
			bad("ngcKeySecret", "%q: %s", c.NGCKeySecret, m)
		}
	}
	images := []struct{ field, ref string }{{"images.vllm", c.Images.VLLM}, {"images.parakeet", c.Images.Parakeet}}
	if c.AgentDelivery == vmboot.DeliveryDisk {
		images = append(images, struct{ field, ref string }{"images.agentDisk", c.Images.AgentDisk})
	}
	switch {
	case (c.Images.LlamaCPP == "") != (c.Images.EngineDisk == ""):
		bad("images", "set both llamaCPP and engineDisk (the llama.cpp runtime's VM image and engine disk) or neither")
	case c.Images.LlamaCPP != "":
		images = append(images, struct{ field, ref string }{"images.llamaCPP", c.Images.LlamaCPP},
			struct{ field, ref string }{"images.engineDisk", c.Images.EngineDisk})
	}
	for _, im := range images {
		if im.ref == "" {
			bad(im.field, "is required")
		} else if len(im.ref) > 512 || !imageRe.MatchString(strings.TrimPrefix(im.ref, "docker://")) {
			bad(im.field, "%q is not an image reference", im.ref)
		}
	}
	if c.PerGPU.CPU < 1 || c.PerGPU.CPU > MaxPerGPUCPU {
		bad("perGPU.cpu", "%d: want 1 to %d vCPUs", c.PerGPU.CPU, MaxPerGPUCPU)
	}
	if c.PerGPU.MemoryGB < 1 || c.PerGPU.MemoryGB > MaxPerGPUMem {
		bad("perGPU.memoryGB", "%d: want 1 to %d GiB", c.PerGPU.MemoryGB, MaxPerGPUMem)
	}
	if !(c.Client.QPS > 0 && c.Client.QPS <= MaxQPS) {
		bad("client.qps", "%g: want above 0 and at most %d", c.Client.QPS, MaxQPS)
	}
	if c.Client.Burst < 1 || c.Client.Burst < int(c.Client.QPS) {
		bad("client.burst", "%d: want at least 1 and at least client.qps (%g)", c.Client.Burst, c.Client.QPS)
	}
	if c.DriftPolicy != DriftRecreate && c.DriftPolicy != DriftFail {
		bad("driftPolicy", "%q: want %s or %s", c.DriftPolicy, DriftRecreate, DriftFail)
	}
	if c.ImportRestartLimit < 0 {
		bad("importRestartLimit", "%d: must not be negative", c.ImportRestartLimit)
	}
	if c.UnschedulableGrace.D() < 0 {
		bad("unschedulableGrace", "%s: must not be negative", c.UnschedulableGrace.D())
	}
	for i, t := range c.Tolerations {
		switch t.Operator {
		case "", corev1.TolerationOpEqual, corev1.TolerationOpExists:
		default:
			bad(fmt.Sprintf("tolerations[%d].operator", i), "%q: want Equal or Exists", t.Operator)
		}
		switch t.Effect {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			bad(fmt.Sprintf("tolerations[%d].effect", i), "%q: want NoSchedule, PreferNoSchedule or NoExecute (or empty: all)", t.Effect)
		}
	}
	if c.AgentDelivery == "" {
		bad("agentDelivery", "is required: %s or %s", vmboot.DeliveryDisk, vmboot.DeliveryImage)
	}
	if c.AgentPath == "" {
		bad("agentPath", "is required")
	}
	errs = append(errs, c.agent().Check())
	if c.Firmware.PCIHole64GiB < 0 || c.Firmware.PCIHole64GiB > MaxPCIHole64GiB {
		bad("firmware.pciHole64GiB", "%d: want 0 (the firmware decides) to %d", c.Firmware.PCIHole64GiB, MaxPCIHole64GiB)
	}
	if im := c.Firmware.HookSidecarImage; im != "" && (len(im) > 512 || !imageRe.MatchString(im)) {
		bad("firmware.hookSidecarImage", "%q is not an image reference", im)
	}
	for i, p := range c.Peers {
		f := fmt.Sprintf("peers[%d]", i)
		if !slices.Contains(peerRoles, p.Role) {
			bad(f+".role", "%q: want one of %s", p.Role, strings.Join(peerRoles, ", "))
		}
		if _, err := fabric.ParsePublicKey(p.Key); err != nil {
			bad(f+".key", "%v", err)
			continue
		}
		for j, a := range p.Addrs {
			if _, _, err := fabric.ParsePeer(p.Key + "@" + a); err != nil {
				bad(fmt.Sprintf("%s.addrs[%d]", f, j), "%q: %v", a, err)
			}
		}
	}
	for i, t := range c.RequireAgent {
		if t != cosmic.TypeGPUContainer && t != cosmic.TypeManagedInference {
			bad(fmt.Sprintf("requireAgent[%d]", i), "%q: want %s or %s", t, cosmic.TypeGPUContainer, cosmic.TypeManagedInference)
		}
	}
	if c.AgentTimeout.D() <= 0 {
		bad("agentTimeout", "%s: must be positive", c.AgentTimeout.D())
	}
	return errors.Join(errs...)
}

// agent is how the VMIs get their agent.
func (c RackConfig) agent() vmboot.Agent {
	return vmboot.Agent{Delivery: c.AgentDelivery, Path: c.AgentPath}
}

// checkNAD checks a "name" or "namespace/name" NAD reference.
func (c RackConfig) checkNAD(bad func(string, string, ...any), field, ref string) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok {
		ns, name = c.Namespace, ref
	}
	msgs := validation.IsDNS1123Label(ns)
	msgs = append(msgs, validation.IsDNS1123Subdomain(name)...)
	if len(msgs) > 0 {
		bad(field, "%q is not a NetworkAttachmentDefinition reference (name or namespace/name): %s", ref, strings.Join(msgs, "; "))
	}
}

// model is g's GPU model, defaulted from its resource name.
func (g GPUResource) model() string {
	if g.Model != "" {
		return g.Model
	}
	_, name, _ := strings.Cut(g.Resource, "/")
	return name
}

// deviceName is g's KubeVirt deviceName, defaulted to its resource name.
func (g GPUResource) deviceName() string {
	if g.DeviceName != "" {
		return g.DeviceName
	}
	return g.Resource
}

// nvidiaPrefix is the vendor prefix of GPUs found without a mapping.
const nvidiaPrefix = "nvidia.com/"

// genericGPUResource is the NVIDIA device plugin's container resource, never
// a passthrough GPU.
const genericGPUResource = "nvidia.com/gpu"

// gpuForModel is the mapping that gives GPUs of model, and whether there is one.
func (c RackConfig) gpuForModel(model string) (GPUResource, bool) {
	if len(c.GPUResources) == 0 {
		r := nvidiaPrefix + model
		if !cosmic.ValidGPUModel(model) || r == genericGPUResource || strings.HasPrefix(model, "mig-") || len(validation.IsQualifiedName(r)) > 0 {
			return GPUResource{}, false
		}
		return GPUResource{Resource: r}, true
	}
	for _, g := range c.GPUResources {
		if g.model() == model {
			return g, true
		}
	}
	return GPUResource{}, false
}

// gpuForResource is the mapping of an extended resource, and whether it is a GPU.
func (c RackConfig) gpuForResource(name corev1.ResourceName) (GPUResource, bool) {
	r := string(name)
	if len(c.GPUResources) == 0 {
		model, ok := strings.CutPrefix(r, nvidiaPrefix)
		if !ok || r == genericGPUResource || strings.HasPrefix(model, "mig-") || !cosmic.ValidGPUModel(model) {
			return GPUResource{}, false
		}
		return GPUResource{Resource: r}, true
	}
	for _, g := range c.GPUResources {
		if g.Resource == r {
			return g, true
		}
	}
	return GPUResource{}, false
}

// nadRef is ref as "namespace/name", the form Multus takes across namespaces.
func (c RackConfig) nadRef(ref string) string {
	if strings.Contains(ref, "/") {
		return ref
	}
	return c.Namespace + "/" + ref
}
