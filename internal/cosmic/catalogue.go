package cosmic

import (
	"fmt"
	"slices"
	"strings"
)

// Catalogue is what a rack can run, as its worker reports it: the images
// it boots, the job types and managed-inference runtimes it serves, and the
// most vCPUs and memory it gives one VM. The ork refuses at create a job
// that no rack of its location can run (Refuses), and the API, `cosmicac
// locations` and the new-job form show it.
type Catalogue struct {
	// Images are the image names a job's spec may give; empty: any image
	// (the rack imports what it is given).
	Images []string `json:"images,omitempty"`
	// JobTypes are the job types the rack runs.
	JobTypes []JobType `json:"jobTypes"`
	// Runtimes are the managed-inference runtimes it serves (none when it
	// runs no managed-inference job).
	Runtimes []Runtime `json:"runtimes,omitempty"`
	// MaxVMCPUs and MaxVMMemoryMiB cap what one VM gets, whatever its job
	// asks (zero: no cap but the node's). A job's replica gets its share
	// of resources.cpu and resources.memory up to them
	// (ReplicaStatus.Given says what it got).
	MaxVMCPUs      int   `json:"maxVmCpus,omitempty"`
	MaxVMMemoryMiB int64 `json:"maxVmMemoryMiB,omitempty"`
}

// CatalogueRefusal is why a rack cannot run a spec: the spec's field and
// a reason with code not_in_catalogue.
type CatalogueRefusal struct {
	Field  string
	Reason Reason
}

// Refuses says why a rack of this catalogue can never run spec (nil: it
// can). asked are the job's resources as its creator wrote them, before
// Default: a cap refuses only what was asked for (a default is given up
// to the cap).
func (c Catalogue) Refuses(spec Spec, asked Resources) *CatalogueRefusal {
	refuse := func(field, format string, args ...any) *CatalogueRefusal {
		return &CatalogueRefusal{Field: field, Reason: NewReason(ReasonNotInCatalogue, fmt.Sprintf(format, args...))}
	}
	if !slices.Contains(c.JobTypes, spec.Type) {
		return refuse("type", "its racks run %s jobs, not %s", joinOr(c.JobTypes), spec.Type)
	}
	if spec.Type == TypeManagedInference && spec.Inference != nil && !slices.Contains(c.Runtimes, spec.Inference.Runtime) {
		return refuse("inference.runtime", "its racks serve the runtimes %s, not %s", joinOr(c.Runtimes), spec.Inference.Runtime)
	}
	if len(c.Images) > 0 && spec.Image != "" && !slices.Contains(c.Images, spec.Image) {
		return refuse("image", "its racks boot the images %s, not %q", joinOr(c.Images), spec.Image)
	}
	if c.MaxVMCPUs > 0 && asked.CPU > c.MaxVMCPUs {
		return refuse("resources.cpu", "%d vCPUs asked, a VM of its racks gets at most %d", asked.CPU, c.MaxVMCPUs)
	}
	if c.MaxVMMemoryMiB > 0 && int64(asked.Memory)*1024 > c.MaxVMMemoryMiB {
		return refuse("resources.memory", "%d GiB asked, a VM of its racks gets at most %d MiB", asked.Memory, c.MaxVMMemoryMiB)
	}
	return nil
}

func joinOr[S ~string](xs []S) string {
	if len(xs) == 0 {
		return "none"
	}
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}

// Given is what a rack gave one replica: its VMs' vCPUs, memory and
// GPUs, summed over its VMs. It may be less than the job asked for (a
// QEMU rack caps a VM's vCPUs and memory, and one that declares its GPUs
// for placement only passes none through).
type Given struct {
	CPUs      int   `json:"cpus"`
	MemoryMiB int64 `json:"memoryMiB"`
	GPUs      int   `json:"gpus"`
	// Note says why it differs from what was asked, when it does.
	Note string `json:"note,omitempty"`
}

// ShareOf is what a rack that gives each VM its share of the job
// (Spec.NodeShare: the simulated and Kubernetes racks) gives the replica
// on res: the shares summed over its nodes, and its GPUs.
func ShareOf(spec Spec, res Reservation) Given {
	var g Given
	total := res.Count()
	for _, n := range res.Nodes {
		vcpus, mem := spec.NodeShare(len(n.GPUs), total)
		g.CPUs += vcpus
		g.MemoryMiB += int64(mem) * 1024
		g.GPUs += len(n.GPUs)
	}
	return g
}
