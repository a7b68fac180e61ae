package cosmic

import (
	"fmt"
	"time"
)

// RackTypeServer is the only rack type: a worker driving one Kubernetes cluster.
const RackTypeServer = "server"

// Rack is the capacity behind one worker, listed under one location.
type Rack struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	Location  string    `json:"location"`
	GPUModel  string    `json:"gpuModel"`
	WorkerKey string    `json:"workerKey"` // the worker's ed25519 public key, 64 hex digits
	CreatedAt time.Time `json:"createdAt"`
	// AgentDeadline is how long, in seconds, a replica placed (or
	// restarted) on the rack may take until its agent connects; then it
	// fails with agent_timeout. 0: DefaultAgentDeadline.
	AgentDeadline int `json:"agentDeadline,omitempty"`
	// PlacementPolicy is how the ork ranks the nodes of the rack's
	// location (PolicyBestFit or PolicyFGD); empty: the ork's default. All
	// racks of one location share one policy.
	PlacementPolicy string `json:"placementPolicy,omitempty"`
}

// The placement policies (docs/placement.md).
const (
	// PolicyBestFit puts a replica on the node with the fewest free GPUs
	// that still fit it, with CPU and memory as filters.
	PolicyBestFit = "best-fit"
	// PolicyFGD puts a replica where it least fragments the location for
	// the job sizes held and waiting (GPUs and CPU) and a whole node,
	// after the FGD paper (USENIX ATC '23); ties go as best-fit. The
	// default.
	PolicyFGD = "fgd"
)

// ValidPolicy reports whether p names a placement policy.
func ValidPolicy(p string) bool { return p == PolicyBestFit || p == PolicyFGD }

// DefaultAgentDeadline is a rack's agent deadline when its registration
// gives none: generous enough for a VM booted under QEMU's software
// emulation (about a minute per boot measured) with a disk import before.
const DefaultAgentDeadline = 10 * time.Minute

// MaxAgentDeadline is the longest agent deadline a rack may have, in seconds.
const MaxAgentDeadline = 24 * 60 * 60

// AgentDeadlineOrDefault is the rack's agent deadline as a duration.
func (r Rack) AgentDeadlineOrDefault() time.Duration {
	if r.AgentDeadline <= 0 {
		return DefaultAgentDeadline
	}
	return time.Duration(r.AgentDeadline) * time.Second
}

// Validate reports every problem of a rack registration at once.
func (r Rack) Validate() error {
	var p problems
	if len(r.ID) > 63 || !identRe.MatchString(r.ID) {
		p.add("id", "%q is not a valid rack ID", r.ID)
	}
	if r.Type != RackTypeServer {
		p.add("type", "%q is not a rack type (want %s)", r.Type, RackTypeServer)
	}
	if !ValidLocation(r.Location) {
		p.add("location", "%q is not a valid location name", r.Location)
	}
	if !ValidGPUModel(r.GPUModel) {
		p.add("gpuModel", "%q is not a valid GPU model name", r.GPUModel)
	}
	if !ValidWorkerKey(r.WorkerKey) {
		p.add("workerKey", "must be 64 lowercase hex digits")
	}
	if r.PlacementPolicy != "" && !ValidPolicy(r.PlacementPolicy) {
		p.add("placementPolicy", "%q is not a placement policy (want %s or %s)", r.PlacementPolicy, PolicyBestFit, PolicyFGD)
	}
	if r.AgentDeadline < 0 || r.AgentDeadline > MaxAgentDeadline {
		p.add("agentDeadline", "must be 0 (the default, %s) to %d seconds", DefaultAgentDeadline, MaxAgentDeadline)
	}
	return p.err()
}

// Node is a machine of a rack holding a pool of GPUs. Only nodes that are
// both Schedulable and Ready receive new placements.
//
// UsedGPUs and FreeGPUs are the ork's account of the GPUs, not the worker's:
// a worker reports them zero and the ork fills them in when it lists racks.
// UsedGPUs are held by replicas; FreeGPUs are those a replica could be placed
// on, so none on a node that is not both Schedulable and Ready. A replica of
// a single-node job runs on one node, so a rack's free GPUs, the sum of its
// nodes', can be more than such a job can get.
type Node struct {
	Name        string `json:"name"`
	Rack        string `json:"rack"`
	GPUModel    string `json:"gpuModel"`
	GPUs        int    `json:"gpus"` // total, free or not
	Schedulable bool   `json:"schedulable"`
	Ready       bool   `json:"ready"`
	UsedGPUs    int    `json:"usedGpus"`
	FreeGPUs    int    `json:"freeGpus"`
	// CPUMilli and MemoryMiB are what the node can give CosmicAC's jobs
	// (Kubernetes: allocatable less what other pods request). Zero: the
	// worker does not report it, and placement does not limit it.
	CPUMilli  int64 `json:"cpuMilli,omitempty"`
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// UsedCPUMilli and UsedMemoryMiB are the ork's account, like UsedGPUs:
	// what reservations hold on the node.
	UsedCPUMilli  int64 `json:"usedCpuMilli,omitempty"`
	UsedMemoryMiB int64 `json:"usedMemoryMiB,omitempty"`
}

// GPURef names one GPU: its index on a node of a rack.
type GPURef struct {
	Rack  string `json:"rack"`
	Node  string `json:"node"`
	Index int    `json:"index"`
}

func (g GPURef) String() string { return fmt.Sprintf("%s/%s/%d", g.Rack, g.Node, g.Index) }

// NodeAlloc is the GPUs (indices, ascending) one reservation takes on one node.
type NodeAlloc struct {
	Node string `json:"node"`
	GPUs []int  `json:"gpus"`
	// CPUMilli and MemoryMiB are what the replica's VM takes on the node:
	// its share of the job's CPU and memory plus the rack's VMOverhead.
	CPUMilli  int64 `json:"cpuMilli,omitempty"`
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
}

// VMOverhead is what a rack's hypervisor takes for each VM beyond the
// guest's own vCPUs and memory, as the rack's worker reports it (KubeVirt:
// the virt-launcher pod's overhead; QEMU: the process's own memory).
type VMOverhead struct {
	CPUMilli  int64 `json:"cpuMilli,omitempty"`  // per VM
	MemoryMiB int64 `json:"memoryMiB,omitempty"` // per VM
	// MemoryMiBPerVCPU, MemoryMiBPerGPU: per guest vCPU and per GPU.
	MemoryMiBPerVCPU int64 `json:"memoryMiBPerVCpu,omitempty"`
	MemoryMiBPerGPU  int64 `json:"memoryMiBPerGpu,omitempty"`
	// MemoryPerGuestGiBMiB is MiB per GiB of guest memory (page tables).
	MemoryPerGuestGiBMiB int64 `json:"memoryPerGuestGiBMiB,omitempty"`
}

// Charge is what a VM of vcpus, memGiB GiB and gpus GPUs takes on its node:
// its own CPU and memory plus the overhead.
func (o VMOverhead) Charge(vcpus, memGiB, gpus int) (cpuMilli, memMiB int64) {
	cpuMilli = int64(vcpus)*1000 + o.CPUMilli
	memMiB = int64(memGiB)*1024 + o.MemoryMiB + int64(vcpus)*o.MemoryMiBPerVCPU +
		int64(gpus)*o.MemoryMiBPerGPU + int64(memGiB)*o.MemoryPerGuestGiBMiB
	return cpuMilli, memMiB
}

// NodeShare is the vCPUs and GiB of memory of a replica's VM on a node
// holding gpus of the replica's total GPUs: its share in proportion, at
// least 1 of each. The Kubernetes worker sizes its VMIs with it.
// A zero in the spec stays zero.
func (s Spec) NodeShare(gpus, total int) (vcpus, memGiB int) {
	share := func(v int) int {
		if v <= 0 || total <= 0 || gpus >= total {
			return max(v, 0)
		}
		return max(1, v*gpus/total)
	}
	return share(s.Resources.CPU), share(s.Resources.Memory)
}

// Reservation is the GPUs held by one replica of a job: all on one rack,
// on one node or (vLLM replicas) on k nodes with the same count on each.
type Reservation struct {
	JobID   string      `json:"jobId"`
	Replica int         `json:"replica"`
	Rack    string      `json:"rack"`
	Nodes   []NodeAlloc `json:"nodes"`
}

// GPUs lists every GPU of the reservation.
func (r Reservation) GPUs() []GPURef {
	out := make([]GPURef, 0, r.Count())
	for _, n := range r.Nodes {
		for _, i := range n.GPUs {
			out = append(out, GPURef{Rack: r.Rack, Node: n.Node, Index: i})
		}
	}
	return out
}

// Count is the number of GPUs of the reservation.
func (r Reservation) Count() int {
	c := 0
	for _, n := range r.Nodes {
		c += len(n.GPUs)
	}
	return c
}

// CPUMilli and MemoryMiB sum what the reservation takes on its nodes.
func (r Reservation) CPUMilli() int64 {
	var c int64
	for _, n := range r.Nodes {
		c += n.CPUMilli
	}
	return c
}

// MemoryMiB sums the memory the reservation takes on its nodes.
func (r Reservation) MemoryMiB() int64 {
	var c int64
	for _, n := range r.Nodes {
		c += n.MemoryMiB
	}
	return c
}

// NodeNames lists the nodes of the reservation, in order.
func (r Reservation) NodeNames() []string {
	out := make([]string, len(r.Nodes))
	for i, n := range r.Nodes {
		out[i] = n.Node
	}
	return out
}
