package placement

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

const h100 = "GH100_H100_SXM5_80GB"

// fleet builds racks and nodes: each rack spec is "id location model nodes gpus".
func fleet(t testing.TB, racks ...string) ([]cosmic.Rack, []cosmic.Node) {
	t.Helper()
	var rs []cosmic.Rack
	var ns []cosmic.Node
	for _, spec := range racks {
		var id, loc, model string
		var nodes, gpus int
		if _, err := fmt.Sscan(spec, &id, &loc, &model, &nodes, &gpus); err != nil {
			t.Fatalf("fleet %q: %v", spec, err)
		}
		rs = append(rs, cosmic.Rack{ID: id, Type: cosmic.RackTypeServer, Location: loc, GPUModel: model})
		for i := range nodes {
			ns = append(ns, cosmic.Node{Name: fmt.Sprintf("%s-n%d", id, i), Rack: id, GPUs: gpus, Schedulable: true, Ready: true})
		}
	}
	return rs, ns
}

// snap is a best-fit snapshot: the table tests below are best-fit's.
func snap(t testing.TB, racks []cosmic.Rack, nodes []cosmic.Node, res ...cosmic.Reservation) *Snapshot {
	t.Helper()
	s, err := NewSnapshot(racks, nodes, res, WithDefaultPolicy(cosmic.PolicyBestFit))
	if err != nil {
		t.Fatalf("NewSnapshot: %v", err)
	}
	return s
}

func container(id, loc, model string, g int) cosmic.Job {
	return cosmic.Job{ID: id, Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer, Location: loc, Image: "i",
		Resources: cosmic.Resources{GPU: g, GPUModel: model}}}
}

func inference(id, loc, model string, runtime cosmic.Runtime, g, replicas int) cosmic.Job {
	s := cosmic.Spec{Type: cosmic.TypeManagedInference, Location: loc, Resources: cosmic.Resources{GPUModel: model},
		Inference: &cosmic.InferenceSpec{Runtime: runtime, Model: "m/m", Replicas: replicas, GPUsPerReplica: g}}
	s.Default()
	return cosmic.Job{ID: id, Spec: s}
}

func vllm(id, loc, model string, g, replicas int) cosmic.Job {
	return inference(id, loc, model, cosmic.RuntimeVLLM, g, replicas)
}

func res(job string, replica int, rack string, allocs ...cosmic.NodeAlloc) cosmic.Reservation {
	return cosmic.Reservation{JobID: job, Replica: replica, Rack: rack, Nodes: allocs}
}

func alloc(node string, gpus ...int) cosmic.NodeAlloc {
	return cosmic.NodeAlloc{Node: node, GPUs: gpus}
}

func seq(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

// mustPlace places and applies, failing unless the decision is Placed.
func mustPlace(t *testing.T, s *Snapshot, j cosmic.Job) []cosmic.Reservation {
	t.Helper()
	d := Place(s, j)
	p, ok := d.(Placed)
	if !ok {
		t.Fatalf("Place(%s) = %#v, want Placed", j.ID, d)
	}
	for _, r := range p.Reservations {
		if err := s.Apply(r); err != nil {
			t.Fatalf("Apply(%+v): %v", r, err)
		}
	}
	return p.Reservations
}

func TestPlace(t *testing.T) {
	twoBy8 := []string{"r1 us " + h100 + " 2 8"}
	tests := []struct {
		name     string
		racks    []string
		modify   func(nodes []cosmic.Node) // before the snapshot
		reserved []cosmic.Reservation
		job      cosmic.Job
		want     Decision
	}{
		{
			name:  "container on one node, lowest indices",
			racks: twoBy8,
			job:   container("j", "us", h100, 2),
			want:  Placed{[]cosmic.Reservation{res("j", 0, "r1", alloc("r1-n0", 0, 1))}},
		},
		{
			name:     "bin-packing prefers the fullest node that fits",
			racks:    twoBy8,
			reserved: []cosmic.Reservation{res("a", 0, "r1", alloc("r1-n1", 0, 1, 2, 3, 4, 5))},
			job:      container("j", "us", h100, 2),
			want:     Placed{[]cosmic.Reservation{res("j", 0, "r1", alloc("r1-n1", 6, 7))}},
		},
		{
			name:     "bin-packing skips nodes with too few free GPUs",
			racks:    twoBy8,
			reserved: []cosmic.Reservation{res("a", 0, "r1", alloc("r1-n1", 0, 1, 2, 3, 4, 5, 6))},
			job:      container("j", "us", h100, 2),
			want:     Placed{[]cosmic.Reservation{res("j", 0, "r1", alloc("r1-n0", 0, 1))}},
		},
		{
			name:     "free GPUs with holes",
			racks:    twoBy8,
			reserved: []cosmic.Reservation{res("a", 0, "r1", alloc("r1-n0", 0, 2, 4, 6))},
			job:      container("j", "us", h100, 3),
			want:     Placed{[]cosmic.Reservation{res("j", 0, "r1", alloc("r1-n0", 1, 3, 5))}},
		},
		{
			name:  "ties broken by rack ID then node name",
			racks: []string{"r2 us " + h100 + " 1 8", "r1 us " + h100 + " 2 8"},
			job:   container("j", "us", h100, 8),
			want:  Placed{[]cosmic.Reservation{res("j", 0, "r1", alloc("r1-n0", seq(0, 8)...))}},
		},
		{
			name:  "only the location asked",
			racks: []string{"a eu " + h100 + " 1 8", "b us " + h100 + " 1 8"},
			job:   container("j", "us", h100, 1),
			want:  Placed{[]cosmic.Reservation{res("j", 0, "b", alloc("b-n0", 0))}},
		},
		{
			name:  "only the model asked",
			racks: []string{"a us A100 1 8", "b us " + h100 + " 1 8"},
			job:   container("j", "us", h100, 1),
			want:  Placed{[]cosmic.Reservation{res("j", 0, "b", alloc("b-n0", 0))}},
		},
		{
			name:     "empty model takes any model of the location, best fit first",
			racks:    []string{"a us A100 1 8", "b us " + h100 + " 1 8"},
			reserved: []cosmic.Reservation{res("x", 0, "b", alloc("b-n0", 0, 1, 2, 3))},
			job:      container("j", "us", "", 4),
			want:     Placed{[]cosmic.Reservation{res("j", 0, "b", alloc("b-n0", 4, 5, 6, 7))}},
		},
		{
			name:  "node model overrides its rack's",
			racks: []string{"a us A100 2 8"},
			modify: func(ns []cosmic.Node) {
				ns[1].GPUModel = h100
			},
			job:  container("j", "us", h100, 1),
			want: Placed{[]cosmic.Reservation{res("j", 0, "a", alloc("a-n1", 0))}},
		},
		{
			name:  "unknown location",
			racks: twoBy8,
			job:   container("j", "mars", h100, 1),
			want:  Impossible{cosmic.Reason{Code: cosmic.ReasonNoSuchLocation, Message: `no rack is registered in the job's location: "mars"`, Fix: cosmic.NewReason(cosmic.ReasonNoSuchLocation, "").Fix}},
		},
		{
			name:  "unknown model",
			racks: []string{"a us A100 1 8", "b us B200 1 8"},
			job:   container("j", "us", h100, 1),
			want:  Impossible{cosmic.NewReason(cosmic.ReasonNoSuchGPUModel, "no rack in us has "+h100+" (it has A100, B200)")},
		},
		{
			name:  "container larger than any node",
			racks: twoBy8,
			job:   container("j", "us", h100, 9),
			want: Impossible{cosmic.NewReason(cosmic.ReasonExceedsNodeGPUs,
				"a replica asks for 9 GPUs on one node; the largest node in us holds 8")},
		},
		{
			name:  "parakeet larger than any node is not split",
			racks: []string{"r1 us " + h100 + " 2 1"},
			job:   inference("j", "us", h100, cosmic.RuntimeParakeet, 2, 1),
			want: Impossible{cosmic.NewReason(cosmic.ReasonExceedsNodeGPUs,
				"a replica asks for 2 GPUs on one node; the largest node in us holds 1")},
		},
		{
			name:     "wait when busy",
			racks:    twoBy8,
			reserved: []cosmic.Reservation{res("a", 0, "r1", alloc("r1-n0", 0)), res("b", 0, "r1", alloc("r1-n1", 7))},
			job:      container("j", "us", h100, 8),
			want:     Wait{cosmic.NewReason(cosmic.ReasonNoCapacity, "8 × "+h100+" in us"), "8 × " + h100 + " in us"},
		},
		{
			name:   "unschedulable and not-ready nodes are not used now",
			racks:  twoBy8,
			modify: func(ns []cosmic.Node) { ns[0].Schedulable = false; ns[1].Ready = false },
			job:    container("j", "us", "", 1),
			want:   Wait{cosmic.NewReason(cosmic.ReasonNoCapacity, "1 × GPU in us"), "1 × GPU in us"},
		},
		{
			name:   "unschedulable nodes still count for could-ever-fit",
			racks:  []string{"r1 us " + h100 + " 1 8", "r2 us " + h100 + " 1 4"},
			modify: func(ns []cosmic.Node) { ns[0].Schedulable = false },
			job:    container("j", "us", h100, 8),
			want:   Wait{cosmic.NewReason(cosmic.ReasonNoCapacity, "8 × "+h100+" in us"), "8 × " + h100 + " in us"},
		},
		{
			name:  "no node reported yet",
			racks: []string{"r1 us " + h100 + " 0 8"},
			job:   container("j", "us", h100, 1),
			want: Wait{cosmic.NewReason(cosmic.ReasonNoCapacity, "1 × "+h100+" in us: no node of the location has reported yet"),
				"1 × " + h100 + " in us"},
		},
		{
			name:  "vLLM replica that fits one node stays on one node",
			racks: twoBy8,
			job:   vllm("j", "us", h100, 8, 1),
			want:  Placed{[]cosmic.Reservation{res("j", 0, "r1", alloc("r1-n0", seq(0, 8)...))}},
		},
		{
			name:     "vLLM replica that fits one node waits rather than split",
			racks:    twoBy8,
			reserved: []cosmic.Reservation{res("a", 0, "r1", alloc("r1-n0", 0)), res("b", 0, "r1", alloc("r1-n1", 0))},
			job:      vllm("j", "us", h100, 8, 1),
			want:     Wait{cosmic.NewReason(cosmic.ReasonNoCapacity, "8 × "+h100+" in us"), "8 × " + h100 + " in us"},
		},
		{
			name:  "16-GPU vLLM replica takes 2 nodes × 8",
			racks: twoBy8,
			job:   vllm("j", "us", h100, 16, 1),
			want:  Placed{[]cosmic.Reservation{res("j", 0, "r1", alloc("r1-n0", seq(0, 8)...), alloc("r1-n1", seq(0, 8)...))}},
		},
		{
			name:     "12-GPU vLLM replica takes 2 nodes × 6",
			racks:    []string{"r1 us " + h100 + " 3 8"},
			reserved: []cosmic.Reservation{res("a", 0, "r1", alloc("r1-n1", 0, 1))},
			job:      vllm("j", "us", h100, 12, 1),
			want:     Placed{[]cosmic.Reservation{res("j", 0, "r1", alloc("r1-n0", 0, 1, 2, 3, 4, 5), alloc("r1-n1", 2, 3, 4, 5, 6, 7))}},
		},
		{
			name:  "smallest k that fits now",
			racks: []string{"r1 us " + h100 + " 4 8"},
			reserved: []cosmic.Reservation{res("a", 0, "r1", alloc("r1-n0", 0, 1, 2, 3)), res("b", 0, "r1", alloc("r1-n1", 0, 1, 2, 3)),
				res("c", 0, "r1", alloc("r1-n2", 0, 1, 2, 3)), res("d", 0, "r1", alloc("r1-n3", 0, 1, 2, 3))},
			job: vllm("j", "us", h100, 16, 1),
			want: Placed{[]cosmic.Reservation{res("j", 0, "r1", alloc("r1-n0", 4, 5, 6, 7), alloc("r1-n1", 4, 5, 6, 7),
				alloc("r1-n2", 4, 5, 6, 7), alloc("r1-n3", 4, 5, 6, 7))}},
		},
		{
			name:     "multi-node replica stays in one rack",
			racks:    []string{"r1 us " + h100 + " 2 8", "r2 us " + h100 + " 2 8"},
			reserved: []cosmic.Reservation{res("a", 0, "r1", alloc("r1-n0", 0)), res("b", 0, "r2", alloc("r2-n1", 0))},
			job:      vllm("j", "us", h100, 16, 1),
			want:     Wait{cosmic.NewReason(cosmic.ReasonNoCapacity, "16 × "+h100+" in us"), "16 × " + h100 + " in us"},
		},
		{
			name:  "multi-node replica that no rack could hold",
			racks: []string{"r1 us " + h100 + " 2 8", "r2 us " + h100 + " 2 8"},
			job:   vllm("j", "us", h100, 24, 1),
			want: Impossible{cosmic.NewReason(cosmic.ReasonExceedsNodeGPUs,
				"a replica of 24 GPUs cannot be split evenly over the nodes of any one rack in us (largest node: 8 GPUs)")},
		},
		{
			name:  "multi-node replica with a prime GPU count",
			racks: []string{"r1 us " + h100 + " 8 8"},
			job:   vllm("j", "us", h100, 13, 1),
			want: Impossible{cosmic.NewReason(cosmic.ReasonExceedsNodeGPUs,
				"a replica of 13 GPUs cannot be split evenly over the nodes of any one rack in us (largest node: 8 GPUs)")},
		},
		{
			name:  "replicas may share a node",
			racks: []string{"r1 us " + h100 + " 1 8"},
			job:   vllm("j", "us", h100, 4, 2),
			want: Placed{[]cosmic.Reservation{res("j", 0, "r1", alloc("r1-n0", 0, 1, 2, 3)),
				res("j", 1, "r1", alloc("r1-n0", 4, 5, 6, 7))}},
		},
		{
			name:     "replicas all or nothing",
			racks:    twoBy8,
			reserved: []cosmic.Reservation{res("a", 0, "r1", alloc("r1-n0", 0))},
			job:      vllm("j", "us", h100, 8, 2),
			want: Wait{cosmic.NewReason(cosmic.ReasonNoCapacity, "2 replicas × 8 × "+h100+" in us"),
				"2 replicas × 8 × " + h100 + " in us"},
		},
		{
			name:  "more replicas than the location could ever hold",
			racks: twoBy8,
			job:   vllm("j", "us", h100, 8, 3),
			want: Impossible{cosmic.NewReason(cosmic.ReasonExceedsLocationGPUs,
				"3 replicas of 8 GPUs asked; the nodes of us hold at most 2 of them")},
		},
		{
			name:  "more multi-node replicas than a location could ever hold",
			racks: []string{"r1 us " + h100 + " 3 8"},
			job:   vllm("j", "us", h100, 16, 2),
			want: Impossible{cosmic.NewReason(cosmic.ReasonExceedsLocationGPUs,
				"2 replicas of 16 GPUs asked; the nodes of us hold at most 1 of them")},
		},
		{
			name:  "multi-node replicas over three nodes",
			racks: []string{"r1 us " + h100 + " 3 8"},
			job:   vllm("j", "us", h100, 12, 2),
			want: Placed{[]cosmic.Reservation{
				res("j", 0, "r1", alloc("r1-n0", 0, 1, 2, 3), alloc("r1-n1", 0, 1, 2, 3), alloc("r1-n2", 0, 1, 2, 3)),
				res("j", 1, "r1", alloc("r1-n0", 4, 5, 6, 7), alloc("r1-n1", 4, 5, 6, 7), alloc("r1-n2", 4, 5, 6, 7))}},
		},
		{
			name:     "only replicas without a reservation are placed",
			racks:    twoBy8,
			reserved: []cosmic.Reservation{res("j", 0, "r1", alloc("r1-n0", 0, 1, 2, 3))},
			job:      vllm("j", "us", h100, 4, 2),
			want:     Placed{[]cosmic.Reservation{res("j", 1, "r1", alloc("r1-n0", 4, 5, 6, 7))}},
		},
		{
			name:  "zero GPUs",
			racks: twoBy8,
			job:   container("j", "us", h100, 0),
			want:  Impossible{cosmic.NewReason(cosmic.ReasonInvalidSpec, "a replica asks for 0 GPUs")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			racks, nodes := fleet(t, tt.racks...)
			if tt.modify != nil {
				tt.modify(nodes)
			}
			s := snap(t, racks, nodes, tt.reserved...)
			before := s.Clone()
			got := Place(s, tt.job)
			if diff := cmp.Diff(tt.want, got, gpusOnly); diff != "" {
				t.Errorf("Place() mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before.Reservations(), s.Reservations()); diff != "" {
				t.Errorf("Place changed the snapshot's reservations:\n%s", diff)
			}
			if err := s.check(); err != nil {
				t.Error(err)
			}
			if p, ok := got.(Placed); ok {
				for _, r := range p.Reservations {
					if err := s.Apply(r); err != nil {
						t.Errorf("Apply(%+v): %v", r, err)
					}
				}
			}
		})
	}
}

func TestMultiNodeReplicasSpreadWhenBinPackingStrands(t *testing.T) {
	// Nodes of 4, 2, 2, 2, 2 GPUs; two replicas of 6 GPUs on 3 nodes × 2.
	// Bin-packing would put the first on three 2-GPU nodes and strand the
	// second; spreading puts both on the 4-GPU node and two others.
	racks, nodes := fleet(t, "r1 us "+h100+" 5 2")
	nodes[0].GPUs = 4
	s := snap(t, racks, nodes)
	got := mustPlace(t, s, vllm("j", "us", h100, 6, 2))
	want := []cosmic.Reservation{
		res("j", 0, "r1", alloc("r1-n0", 0, 1), alloc("r1-n1", 0, 1), alloc("r1-n2", 0, 1)),
		res("j", 1, "r1", alloc("r1-n0", 2, 3), alloc("r1-n3", 0, 1), alloc("r1-n4", 0, 1)),
	}
	if diff := cmp.Diff(want, got, gpusOnly); diff != "" {
		t.Errorf("Place() (-want +got):\n%s", diff)
	}
}

// gpusOnly compares reservations by their GPUs: the tests of GPU rules
// leave the CPU and memory to the tests of those.
var gpusOnly = cmpopts.IgnoreFields(cosmic.NodeAlloc{}, "CPUMilli", "MemoryMiB")

func TestThreeEightGPUJobsOnTwoNodes(t *testing.T) {
	racks, nodes := fleet(t, "r1 us "+h100+" 2 8")
	s := snap(t, racks, nodes)
	a := mustPlace(t, s, container("a", "us", h100, 8))
	mustPlace(t, s, container("b", "us", h100, 8))
	d := Place(s, container("c", "us", h100, 8))
	w, ok := d.(Wait)
	if !ok || w.WaitingFor != "8 × "+h100+" in us" || w.Reason.Code != cosmic.ReasonNoCapacity {
		t.Fatalf("third job: %#v, want Wait", d)
	}
	if err := s.Release(a[0]); err != nil {
		t.Fatal(err)
	}
	got := mustPlace(t, s, container("c", "us", h100, 8))
	if diff := cmp.Diff(a[0].Nodes, got[0].Nodes); diff != "" {
		t.Errorf("c did not take a's GPUs:\n%s", diff)
	}
}

func TestNewSnapshotInvariants(t *testing.T) {
	racks, nodes := fleet(t, "r1 us "+h100+" 2 8")
	tests := []struct {
		name    string
		nodes   []cosmic.Node
		res     []cosmic.Reservation
		wantErr string
	}{
		{"overlap", nodes, []cosmic.Reservation{res("a", 0, "r1", alloc("r1-n0", 0, 1)), res("b", 0, "r1", alloc("r1-n0", 1))}, "not free"},
		{"beyond capacity", nodes, []cosmic.Reservation{res("a", 0, "r1", alloc("r1-n0", 8))}, "no such GPU"},
		{"negative index", nodes, []cosmic.Reservation{res("a", 0, "r1", alloc("r1-n0", -1))}, "no such GPU"},
		{"same GPU twice in one", nodes, []cosmic.Reservation{res("a", 0, "r1", alloc("r1-n0", 3, 3))}, "not free"},
		{"reserved twice", nodes, []cosmic.Reservation{res("a", 0, "r1", alloc("r1-n0", 0)), res("a", 0, "r1", alloc("r1-n1", 0))}, "already reserved"},
		{"node of unknown rack", append(append([]cosmic.Node{}, nodes...), cosmic.Node{Name: "x", Rack: "r9", GPUs: 8}), nil, "unknown rack"},
		{"node twice", append(append([]cosmic.Node{}, nodes...), nodes[0]), nil, "twice"},
		{"too many GPUs", []cosmic.Node{{Name: "big", Rack: "r1", GPUs: 65}}, nil, "GPUs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewSnapshot(racks, tt.nodes, tt.res)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("NewSnapshot error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
	// A reservation on a node no longer listed is kept and can be released.
	orphan := res("o", 0, "r1", alloc("gone", 0, 1))
	s := snap(t, racks, nodes, orphan)
	if _, ok := s.Reserved("o", 0); !ok {
		t.Error("orphan reservation dropped")
	}
	if err := s.Release(orphan); err != nil {
		t.Errorf("Release(orphan) = %v", err)
	}
	if _, err := NewSnapshot(append(racks, racks[0]), nil, nil); err == nil {
		t.Error("rack listed twice accepted")
	}
}

func TestApplyRelease(t *testing.T) {
	racks, nodes := fleet(t, "r1 us "+h100+" 2 8")
	s := snap(t, racks, nodes)
	r := res("a", 0, "r1", alloc("r1-n0", 0, 1), alloc("r1-n1", 0, 1))
	if err := s.Apply(r); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		r    cosmic.Reservation
		want error
		sent error
	}{
		{r, ErrReserved, cosmic.ErrConflict},
		{res("b", 0, "r1", alloc("r1-n0", 2), alloc("r1-n1", 1)), ErrGPUTaken, cosmic.ErrConflict},
		{res("b", 0, "r1", alloc("r1-n0", 2), alloc("nope", 1)), ErrNoSuchGPU, cosmic.ErrInvalid},
		{res("b", 0, "r9", alloc("r1-n0", 2)), ErrNoSuchGPU, cosmic.ErrInvalid},
		{res("b", 0, "r1", alloc("r1-n0", 2), alloc("r1-n0", 3)), ErrGPUTaken, cosmic.ErrConflict},
	} {
		if err := s.Apply(tc.r); !errors.Is(err, tc.want) || !errors.Is(err, tc.sent) {
			t.Errorf("Apply(%+v) = %v, want %v", tc.r, err, tc.want)
		}
	}
	// Failed applies changed nothing.
	if free, _ := s.Free("r1", "r1-n0"); !cmp.Equal(free, seq(2, 6)) {
		t.Errorf("free after failed applies = %v", free)
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(res("zz", 0, "")); !errors.Is(err, ErrNotReserved) || !errors.Is(err, cosmic.ErrNotFound) {
		t.Errorf("Release(unknown) = %v", err)
	}
	if err := s.Apply(res("a", 1, "r1", alloc("r1-n0", 7))); err != nil {
		t.Fatal(err)
	}
	got := s.ReleaseJob("a")
	if len(got) != 2 || got[0].Replica != 0 || got[1].Replica != 1 {
		t.Errorf("ReleaseJob = %+v", got)
	}
	if free, _ := s.Free("r1", "r1-n0"); !cmp.Equal(free, seq(0, 8)) {
		t.Errorf("free after release = %v", free)
	}
	if _, ok := s.Free("r1", "nope"); ok {
		t.Error("Free of unknown node ok")
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
}

func TestCloneIsIndependent(t *testing.T) {
	racks, nodes := fleet(t, "r1 us "+h100+" 2 8")
	s := snap(t, racks, nodes)
	c := s.Clone()
	mustPlace(t, c, container("a", "us", h100, 8))
	if len(s.Reservations()) != 0 {
		t.Error("clone's apply reached the original")
	}
	if free, _ := s.Free("r1", "r1-n0"); len(free) != 8 {
		t.Errorf("original free = %v", free)
	}
	if err := errors.Join(s.check(), c.check()); err != nil {
		t.Fatal(err)
	}
	d := Place(s, container("b", "us", h100, 8))
	if p, ok := d.(Placed); !ok || p.Reservations[0].Nodes[0].Node != "r1-n0" {
		t.Errorf("original placement = %#v", d)
	}
}

func TestUsage(t *testing.T) {
	racks, nodes := fleet(t, "r1 us "+h100+" 2 8", "r2 eu A100 0 8")
	nodes[1].Ready = false
	s := snap(t, racks, nodes, res("a", 0, "r1", alloc("r1-n0", 0, 1, 2)), res("b", 0, "r1", alloc("r1-n1", 0)))
	want := []Usage{
		{Rack: "r1", Location: "us", GPUModel: h100, Nodes: 2, GPUs: 16, Free: 5, Allocated: 4},
		{Rack: "r2", Location: "eu", GPUModel: "A100"},
	}
	if diff := cmp.Diff(want, s.Usage()); diff != "" {
		t.Errorf("Usage() (-want +got):\n%s", diff)
	}
}

// withCPU gives a job CPU (vCPUs) and memory (GiB) per replica.
func withCPU(j cosmic.Job, cpu, memGiB int) cosmic.Job {
	j.Spec.Resources.CPU, j.Spec.Resources.Memory = cpu, memGiB
	return j
}

func TestPlaceCPUAndMemory(t *testing.T) {
	for _, policy := range []string{cosmic.PolicyBestFit, cosmic.PolicyFGD} {
		t.Run(policy, func(t *testing.T) {
			racks, nodes := fleet(t, "r1 us "+h100+" 3 8")
			// n0 has the fewest free GPUs but no CPU left for 16 vCPUs; n1
			// no memory; n2 has both.
			for i := range nodes {
				nodes[i].CPUMilli, nodes[i].MemoryMiB = 64000, 512*1024
			}
			over := map[string]cosmic.VMOverhead{"r1": {CPUMilli: 100, MemoryMiB: 200, MemoryMiBPerGPU: 1024}}
			held := []cosmic.Reservation{
				res("a", 0, "r1", cosmic.NodeAlloc{Node: "r1-n0", GPUs: []int{0}, CPUMilli: 60000, MemoryMiB: 1024}),
				res("b", 0, "r1", cosmic.NodeAlloc{Node: "r1-n1", GPUs: []int{0}, CPUMilli: 1000, MemoryMiB: 500 * 1024}),
			}
			s, err := NewSnapshot(racks, nodes, held, WithOverheads(over), WithDefaultPolicy(policy))
			if err != nil {
				t.Fatal(err)
			}
			got := mustPlace(t, s, withCPU(container("j", "us", h100, 2), 16, 64))
			want := []cosmic.Reservation{res("j", 0, "r1", cosmic.NodeAlloc{Node: "r1-n2", GPUs: []int{0, 1},
				CPUMilli: 16100, MemoryMiB: 64*1024 + 200 + 2*1024})}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Place() (-want +got):\n%s", diff)
			}
			if c, m, _ := s.Used("r1", "r1-n2"); c != 16100 || m != 64*1024+200+2*1024 {
				t.Errorf("Used = %d, %d", c, m)
			}
			// n2 now has 47.9 vCPUs free, n1 63 but not the memory, n0 4: a
			// 60-vCPU job with 12 GiB waits for CPU, naming it.
			d := Place(s, withCPU(container("k", "us", h100, 1), 60, 12))
			w, ok := d.(Wait)
			if !ok || !strings.Contains(w.Reason.Message, "waiting for CPU") {
				t.Errorf("Place = %#v, want a Wait for CPU", d)
			}
			if err := s.check(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestPlaceExceedsNodeCPUOrMemory(t *testing.T) {
	racks, nodes := fleet(t, "r1 us "+h100+" 2 8", "r2 us "+h100+" 1 4")
	for i := range nodes {
		nodes[i].CPUMilli, nodes[i].MemoryMiB = int64(nodes[i].GPUs)*16000, int64(nodes[i].GPUs)*128*1024
	}
	s := snap(t, racks, nodes)
	tests := []struct {
		job  cosmic.Job
		want cosmic.ReasonCode
	}{
		{withCPU(container("a", "us", h100, 1), 129, 8), cosmic.ReasonExceedsNodeCPU},
		{withCPU(container("b", "us", h100, 8), 8, 1025), cosmic.ReasonExceedsNodeMemory},
		{withCPU(vllm("c", "us", h100, 16, 1), 400, 64), cosmic.ReasonExceedsNodeCPU},
		{withCPU(container("d", "us", h100, 9), 8, 8), cosmic.ReasonExceedsNodeGPUs},
	}
	for _, tt := range tests {
		d, ok := Place(s, tt.job).(Impossible)
		if !ok || d.Reason.Code != tt.want {
			t.Errorf("Place(%s) = %#v, want Impossible %s", tt.job.ID, Place(s, tt.job), tt.want)
		}
	}
	// 128 vCPUs fit an 8-GPU node, not a 4-GPU one: placed.
	got := mustPlace(t, s, withCPU(container("e", "us", h100, 1), 128, 8))
	if got[0].Rack != "r1" {
		t.Errorf("placed on %+v", got)
	}
	// Two replicas of 100 vCPU each fit only the two 8-GPU nodes: three do not.
	d, ok := Place(s, withCPU(inference("f", "us", h100, cosmic.RuntimeParakeet, 1, 3), 100, 8)).(Impossible)
	if !ok || d.Reason.Code != cosmic.ReasonExceedsLocationGPUs {
		t.Errorf("three 100-vCPU replicas: %#v, want exceeds_location_gpus", d)
	}
}

// TestFGDKeepsWholeSlots: with 2-GPU jobs common in the mix, best-fit puts
// one on the node with 3 free GPUs, stranding one; fgd puts it on the node
// with 8, where the rest stays usable.
func TestFGDKeepsWholeSlots(t *testing.T) {
	racks, nodes := fleet(t, "r1 us "+h100+" 3 8")
	held := []cosmic.Reservation{res("a", 0, "r1", alloc("r1-n0", 0, 1, 2, 3, 4))}
	for i := range 4 { // the mix: 2-GPU jobs, filling n2
		held = append(held, res(fmt.Sprintf("m%d", i), 0, "r1", alloc("r1-n2", 2*i, 2*i+1)))
	}
	for _, tt := range []struct {
		policy, node string
	}{{cosmic.PolicyBestFit, "r1-n0"}, {cosmic.PolicyFGD, "r1-n1"}} {
		s, err := NewSnapshot(racks, nodes, held, WithDefaultPolicy(tt.policy))
		if err != nil {
			t.Fatal(err)
		}
		got := mustPlace(t, s, container("j", "us", h100, 2))
		if got[0].Nodes[0].Node != tt.node {
			t.Errorf("%s: placed on %s, want %s", tt.policy, got[0].Nodes[0].Node, tt.node)
		}
	}
}

// TestFGDAvoidsStrandingGPUsOnCPU: a CPU-light job goes where the mix's
// CPU-heavy jobs could not fit anyway, keeping the node with CPU for them.
func TestFGDAvoidsStrandingGPUsOnCPU(t *testing.T) {
	racks, nodes := fleet(t, "r1 us "+h100+" 3 8")
	// n0: 8 free GPUs, 128 vCPUs; n1: 8 free GPUs, 40 vCPUs; n2 is full of
	// the mix's CPU-heavy 1-GPU jobs (64 vCPUs each).
	nodes[0].CPUMilli, nodes[1].CPUMilli, nodes[2].CPUMilli = 128000, 40000, 1000000
	var held []cosmic.Reservation
	for i := range 8 {
		held = append(held, res(fmt.Sprintf("h%d", i), 0, "r1", cosmic.NodeAlloc{Node: "r1-n2", GPUs: []int{i}, CPUMilli: 64000}))
	}
	for _, tt := range []struct {
		policy, node string
	}{{cosmic.PolicyBestFit, "r1-n0"}, {cosmic.PolicyFGD, "r1-n1"}} {
		s, err := NewSnapshot(racks, nodes, held, WithDefaultPolicy(tt.policy))
		if err != nil {
			t.Fatal(err)
		}
		got := mustPlace(t, s, withCPU(container("j", "us", h100, 1), 4, 0))
		if got[0].Nodes[0].Node != tt.node {
			t.Errorf("%s: placed on %s, want %s", tt.policy, got[0].Nodes[0].Node, tt.node)
		}
	}
}

// TestPlaceOnKeepsToTheRack: a job that mounts a standalone volume is
// placed only on the rack that keeps it, by either policy, even where the
// policy prefers another; it waits for that rack's GPUs, or for the rack
// to report; a rack of another location or model is no place for it.
func TestPlaceOnKeepsToTheRack(t *testing.T) {
	racks, nodes := fleet(t, "a us "+h100+" 1 8", "b us "+h100+" 1 8", "c eu "+h100+" 1 8")
	// Best-fit and fgd both prefer a's node, which has 2 GPUs free.
	held := []cosmic.Reservation{res("x", 0, "a", alloc("a-n0", seq(0, 6)...))}
	for _, policy := range []string{cosmic.PolicyBestFit, cosmic.PolicyFGD} {
		s, err := NewSnapshot(racks, nodes, held, WithDefaultPolicy(policy))
		if err != nil {
			t.Fatal(err)
		}
		if got := mustPlace(t, s, container("free", "us", h100, 2)); got[0].Rack != "a" {
			t.Fatalf("%s: an unkept job went to %s; the test wants a policy that prefers a", policy, got[0].Rack)
		}
		s, _ = NewSnapshot(racks, nodes, held, WithDefaultPolicy(policy))
		p, ok := PlaceOn(s, container("kept", "us", h100, 2), "b").(Placed)
		if !ok || p.Reservations[0].Rack != "b" {
			t.Errorf("%s: PlaceOn b = %#v, want placed on b", policy, p)
		}
		w, ok := PlaceOn(s, container("big", "us", h100, 4), "a").(Wait)
		if !ok || w.Reason.Code != cosmic.ReasonNoCapacity {
			t.Errorf("%s: 4 GPUs kept to a (2 free) = %#v, want Wait", policy, w)
		}
	}
	s := snap(t, racks, nodes, held...)
	for _, tt := range []struct {
		rack, job string
		g         int
		want      any
		code      cosmic.ReasonCode
		says      string
	}{
		{"z", "us", 1, Wait{}, cosmic.ReasonNoCapacity, "rack z"},
		{"c", "us", 1, Impossible{}, cosmic.ReasonInvalidSpec, "rack c, which is not in us"},
		{"b", "us", 9, Impossible{}, cosmic.ReasonExceedsNodeGPUs, "8"},
	} {
		d := PlaceOn(s, container("j", tt.job, h100, tt.g), tt.rack)
		var r cosmic.Reason
		switch d := d.(type) {
		case Wait:
			r = d.Reason
		case Impossible:
			r = d.Reason
		}
		if fmt.Sprintf("%T", d) != fmt.Sprintf("%T", tt.want) || r.Code != tt.code || !strings.Contains(r.Message, tt.says) {
			t.Errorf("PlaceOn %s, %d GPUs = %#v, want %T %s saying %q", tt.rack, tt.g, d, tt.want, tt.code, tt.says)
		}
	}
}

// TestFGDKeepsRoomForWaitingJobs: the jobs waiting for GPUs are in the mix
// fgd weighs, not only those held. A 6-GPU job waits; a 1-GPU job arrives:
// on the 6-GPU node it would leave 5, where the waiting job cannot go, so
// fgd puts it on the 8-GPU node (which keeps 7). Without the waiting job
// counted, the two nodes tie and the fewest free GPUs wins: the 6-GPU node.
// Unwanted again, the job is out of the mix; a clone and a check agree.
func TestFGDKeepsRoomForWaitingJobs(t *testing.T) {
	racks, nodes := fleet(t, "r1 us "+h100+" 1 8", "r2 us "+h100+" 1 6")
	s, err := NewSnapshot(racks, nodes, nil, WithDefaultPolicy(cosmic.PolicyFGD))
	if err != nil {
		t.Fatal(err)
	}
	one := container("one", "us", h100, 1)
	where := func(s *Snapshot) []cosmic.Reservation {
		t.Helper()
		p, ok := Place(s, one).(Placed)
		if !ok {
			t.Fatalf("Place = %#v, want Placed", Place(s, one))
		}
		return p.Reservations
	}
	if got := where(s); got[0].Rack != "r2" {
		t.Fatalf("with nothing waiting: placed on %s, want r2 (fewest free GPUs)", got[0].Rack)
	}
	big := container("big", "us", h100, 6)
	s.Want(big, 1)
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
	if got := where(s); got[0].Rack != "r1" {
		t.Errorf("with a 6-GPU job waiting: placed on %s, want r1", got[0].Rack)
	}
	if got := where(s.Clone()); got[0].Rack != "r1" {
		t.Errorf("a clone: placed on %s, want r1", got[0].Rack)
	}
	s.Want(big, 0)
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
	if got := where(s); got[0].Rack != "r2" {
		t.Errorf("the waiting job gone: placed on %s, want r2", got[0].Rack)
	}
	// Best-fit keeps no mix: Want is a no-op there.
	bf := snap(t, racks, nodes)
	bf.Want(big, 1)
	if err := bf.check(); err != nil {
		t.Fatal(err)
	}
}
