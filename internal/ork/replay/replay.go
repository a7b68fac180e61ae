// Package replay runs the ork's placement code over a trace read from
// files, with no platform running: a fleet of nodes and pods that arrive
// in order and never depart (`cosmicac ork replay`, docs/placement.md).
//
// Every pod is a GPU Container Job placed with placement.Place and, when
// placed, applied to the snapshot before the next pod. A pod that cannot be
// placed now (no room) or ever (larger than any node) is skipped and the
// replay goes on.
//
// CPU and memory are charged exactly as the files give them: the jobs are
// built so that placement charges each pod's cpu_milli and memory_mib on
// its node, with no VM overhead (the spec's units are whole vCPUs and GiB;
// the replay scales the fleet and the pods alike by 1000 and 1024, so no
// rounding happens).
package replay

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/placement"
)

// DefaultLocation is a node's or pod's location when its file has none.
const DefaultLocation = "default"

// Pod is one row of a pods file: a GPU Container Job.
type Pod struct {
	Name      string
	GPUs      int
	CPUMilli  int64
	MemoryMiB int64
	GPUModel  string // empty: any
	Location  string
}

// Fleet is a nodes file: its racks and nodes.
type Fleet struct {
	Racks []cosmic.Rack
	Nodes []cosmic.Node
}

// FileError is a problem of an input file, with its line.
type FileError struct {
	File string
	Line int // 0: the file as a whole
	Msg  string
}

func (e *FileError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
}

// table reads a CSV file with a header into rows of named columns.
type table struct {
	file string
	cols map[string]int
	rows [][]string
	line []int
}

func readTable(r io.Reader, file string, required, optional []string) (*table, error) {
	cr := csv.NewReader(r)
	cr.TrimLeadingSpace = true
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, &FileError{file, 0, "empty: want a header line"}
	}
	if err != nil {
		return nil, csvError(file, err)
	}
	t := &table{file: file, cols: map[string]int{}}
	known := map[string]bool{}
	for _, c := range slices.Concat(required, optional) {
		known[c] = true
	}
	for i, h := range header {
		h = strings.ToLower(strings.TrimSpace(h))
		if !known[h] {
			return nil, &FileError{file, 1, fmt.Sprintf("unknown column %q (want %s, optionally %s)", h, strings.Join(required, ","), strings.Join(optional, ","))}
		}
		if _, dup := t.cols[h]; dup {
			return nil, &FileError{file, 1, fmt.Sprintf("column %q twice", h)}
		}
		t.cols[h] = i
	}
	for _, c := range required {
		if _, ok := t.cols[c]; !ok {
			return nil, &FileError{file, 1, fmt.Sprintf("no column %q (the header needs %s)", c, strings.Join(required, ","))}
		}
	}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, csvError(file, err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != len(header) {
			return nil, &FileError{file, line, fmt.Sprintf("%d fields, the header has %d", len(rec), len(header))}
		}
		t.rows = append(t.rows, rec)
		t.line = append(t.line, line)
	}
	return t, nil
}

func csvError(file string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &FileError{file, pe.Line, pe.Err.Error()}
	}
	return &FileError{file, 0, err.Error()}
}

func (t *table) get(i int, col string) string {
	if c, ok := t.cols[col]; ok {
		return strings.TrimSpace(t.rows[i][c])
	}
	return ""
}

func (t *table) num(i int, col string, lo, hi int64) (int64, error) {
	s := t.get(i, col)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < lo || v > hi {
		return 0, &FileError{t.file, t.line[i], fmt.Sprintf("%s %q: want a whole number from %d to %d", col, s, lo, hi)}
	}
	return v, nil
}

// Limits of the files' numbers.
const (
	maxCPUMilli  = 1 << 40
	maxMemoryMiB = 1 << 40
)

// ReadNodes reads a nodes file: a header naming name, gpus, gpu_model,
// cpu_milli and memory_mib, optionally location and rack (default: one
// location, one rack per GPU model, "rack-" + the model).
func ReadNodes(r io.Reader, file string) (Fleet, error) {
	t, err := readTable(r, file, []string{"name", "gpus", "gpu_model", "cpu_milli", "memory_mib"}, []string{"location", "rack"})
	if err != nil {
		return Fleet{}, err
	}
	var f Fleet
	racks := map[string]cosmic.Rack{}
	seen := map[[2]string]int{}
	for i := range t.rows {
		name, model := t.get(i, "name"), t.get(i, "gpu_model")
		if name == "" || model == "" {
			return Fleet{}, &FileError{file, t.line[i], "name and gpu_model must not be empty"}
		}
		gpus, err := t.num(i, "gpus", 0, placement.MaxNodeGPUs)
		if err != nil {
			return Fleet{}, err
		}
		cpu, err := t.num(i, "cpu_milli", 1, maxCPUMilli)
		if err != nil {
			return Fleet{}, err
		}
		mem, err := t.num(i, "memory_mib", 1, maxMemoryMiB)
		if err != nil {
			return Fleet{}, err
		}
		loc := cmp.Or(t.get(i, "location"), DefaultLocation)
		rack := cmp.Or(t.get(i, "rack"), "rack-"+model)
		if rk, ok := racks[rack]; ok && rk.Location != loc {
			return Fleet{}, &FileError{file, t.line[i], fmt.Sprintf("rack %s is in location %s, not %s", rack, rk.Location, loc)}
		}
		if l, dup := seen[[2]string{rack, name}]; dup {
			return Fleet{}, &FileError{file, t.line[i], fmt.Sprintf("node %s of rack %s is listed twice (first on line %d)", name, rack, l)}
		}
		seen[[2]string{rack, name}] = t.line[i]
		if _, ok := racks[rack]; !ok {
			racks[rack] = cosmic.Rack{ID: rack, Type: cosmic.RackTypeServer, Location: loc, GPUModel: model}
		}
		n := nodeOf(name, rack, int(gpus), cpu, mem)
		n.GPUModel = model
		f.Nodes = append(f.Nodes, n)
	}
	for _, id := range slices.Sorted(maps.Keys(racks)) {
		f.Racks = append(f.Racks, racks[id])
	}
	return f, nil
}

func rackOf(id string) cosmic.Rack {
	return cosmic.Rack{ID: id, Type: cosmic.RackTypeServer, Location: DefaultLocation, GPUModel: "GPU"}
}

// nodeOf is a node of cpu millicores and mem MiB, scaled so that placement
// charges the pods' figures exactly: a pod's cpu_milli is its spec's
// vCPUs, charged × 1000, its memory_mib its GiB, charged × 1024.
func nodeOf(name, rack string, gpus int, cpu, mem int64) cosmic.Node {
	return cosmic.Node{Name: name, Rack: rack, GPUs: gpus, Schedulable: true, Ready: true, CPUMilli: cpu * 1000, MemoryMiB: mem * 1024}
}

// ReadPods reads a pods file: a header naming name, gpus, cpu_milli and
// memory_mib, optionally gpu_model (empty: any) and location; rows in
// arrival order.
func ReadPods(r io.Reader, file string) ([]Pod, error) {
	t, err := readTable(r, file, []string{"name", "gpus", "cpu_milli", "memory_mib"}, []string{"gpu_model", "location"})
	if err != nil {
		return nil, err
	}
	out := make([]Pod, 0, len(t.rows))
	for i := range t.rows {
		p := Pod{Name: t.get(i, "name"), GPUModel: t.get(i, "gpu_model"), Location: cmp.Or(t.get(i, "location"), DefaultLocation)}
		if p.Name == "" {
			return nil, &FileError{file, t.line[i], "name must not be empty"}
		}
		g, err := t.num(i, "gpus", 0, cosmic.MaxGPUs)
		if err != nil {
			return nil, err
		}
		if p.CPUMilli, err = t.num(i, "cpu_milli", 0, maxCPUMilli); err != nil {
			return nil, err
		}
		if p.MemoryMiB, err = t.num(i, "memory_mib", 0, maxMemoryMiB); err != nil {
			return nil, err
		}
		p.GPUs = int(g)
		out = append(out, p)
	}
	return out, nil
}

// Placement is where one pod went: its node (empty: not placed), the GPU
// indices there, and why not when not.
type Placement struct {
	Pod    string
	Rack   string
	Node   string
	GPUs   []int
	Reason cosmic.ReasonCode // no_capacity, exceeds_node_cpu, ...
}

// Summary is a replay's figures.
type Summary struct {
	Policy        string
	Pods, Placed  int
	FleetGPUs     int
	AllocatedGPUs int
	// UnallocatedAtFull is the share of the fleet's GPUs not allocated
	// when the GPUs the pods that arrived ask for first reach the fleet's
	// (100% arrived GPU demand); ReachedFull false: demand never did, and
	// it is the share at the end.
	UnallocatedAtFull float64
	ReachedFull       bool
	Decisions         int
	Elapsed           time.Duration
}

// DecisionsPerSecond is how fast placement decided.
func (s Summary) DecisionsPerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Decisions) / s.Elapsed.Seconds()
}

// What fgd knows of the workload (Options.Workload).
const (
	// WorkloadOnline: what the ork knows as it runs: the jobs that hold
	// GPUs and those that wait for them (a pod with no room now waits, as
	// it would in the ork's queue).
	WorkloadOnline = "online"
	// WorkloadTrace: the whole trace, from the start, as the FGD paper's
	// artifact gives its policy the pod list's typical pods: each pod is
	// counted as wanted until it holds its GPUs.
	WorkloadTrace = "trace"
)

// Options shape a Run.
type Options struct {
	Policy   string // "": placement.DefaultPolicy
	Workload string // "": WorkloadOnline
}

// Run places the pods on the fleet, in order, by o.Policy.
func Run(f Fleet, pods []Pod, o Options) ([]Placement, Summary, error) {
	policy := cmp.Or(o.Policy, placement.DefaultPolicy)
	workload := cmp.Or(o.Workload, WorkloadOnline)
	if workload != WorkloadOnline && workload != WorkloadTrace {
		return nil, Summary{}, fmt.Errorf("workload %q: want %s or %s", o.Workload, WorkloadOnline, WorkloadTrace)
	}
	s, err := placement.NewSnapshot(f.Racks, f.Nodes, nil, placement.WithDefaultPolicy(policy))
	if err != nil {
		return nil, Summary{}, err
	}
	sum := Summary{Policy: policy, Pods: len(pods)}
	for _, n := range f.Nodes {
		sum.FleetGPUs += n.GPUs
	}
	jobs := make([]cosmic.Job, len(pods))
	for i, p := range pods {
		jobs[i] = cosmic.Job{ID: fmt.Sprintf("pod-%d", i), Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer, Location: p.Location, Image: "replay",
			Resources: cosmic.Resources{GPU: p.GPUs, GPUModel: p.GPUModel, CPU: int(p.CPUMilli), Memory: int(p.MemoryMiB)}}}
		if workload == WorkloadTrace {
			s.Want(jobs[i], 1)
		}
	}
	out := make([]Placement, len(pods))
	demand := 0
	start := time.Now()
	for i, p := range pods {
		job := jobs[i]
		out[i].Pod = p.Name
		sum.Decisions++
		switch d := placement.Place(s, job).(type) {
		case placement.Placed:
			s.Unwant(job.ID)
			for _, r := range d.Reservations {
				if err := s.Apply(r); err != nil {
					return nil, Summary{}, fmt.Errorf("pod %s: %w", p.Name, err)
				}
			}
			r := d.Reservations[0]
			out[i].Rack, out[i].Node, out[i].GPUs = r.Rack, r.Nodes[0].Node, r.Nodes[0].GPUs
			sum.Placed++
			sum.AllocatedGPUs += p.GPUs
		case placement.Wait:
			if workload == WorkloadOnline {
				s.Want(job, 1)
			}
			out[i].Reason = d.Reason.Code
		case placement.Impossible:
			out[i].Reason = d.Reason.Code
		}
		demand += p.GPUs
		if !sum.ReachedFull && sum.FleetGPUs > 0 && demand >= sum.FleetGPUs {
			sum.ReachedFull = true
			sum.UnallocatedAtFull = 1 - float64(sum.AllocatedGPUs)/float64(sum.FleetGPUs)
		}
	}
	sum.Elapsed = time.Since(start)
	if !sum.ReachedFull && sum.FleetGPUs > 0 {
		sum.UnallocatedAtFull = 1 - float64(sum.AllocatedGPUs)/float64(sum.FleetGPUs)
	}
	return out, sum, nil
}

// WriteCSV writes the placements as name,node,gpus: node empty when not
// placed, gpus the indices joined by ";".
func WriteCSV(w io.Writer, ps []Placement) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"name", "node", "gpus"}); err != nil {
		return err
	}
	for _, p := range ps {
		gpus := make([]string, len(p.GPUs))
		for i, g := range p.GPUs {
			gpus[i] = strconv.Itoa(g)
		}
		if err := cw.Write([]string{p.Pod, p.Node, strings.Join(gpus, ";")}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
