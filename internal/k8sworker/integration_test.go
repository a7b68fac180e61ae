package k8sworker

// Integration tests against a real kube-apiserver and etcd with the real
// KubeVirt, CDI and Multus CRDs (internal/k8stest). Nothing runs KubeVirt or
// CDI there: the tests play them, creating Nodes with GPU capacity and
// setting VMI and DataVolume status. They skip (with the command that
// builds the binaries) only when the binaries are missing and neither CI
// nor KUBEBUILDER_ASSETS is set.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/k8stest"
	"github.com/cosmicac/cosmicac/internal/vmboot"
	"github.com/cosmicac/cosmicac/internal/worker"
)

func TestIntegrationContainerJobToRunning(t *testing.T) {
	h := newHarness(t, k8stest.Shared(t), nil)
	h.addNode(h.nodeName(0), 8)
	h.addNode("no-gpus-"+h.cfg.Namespace, 0) // a node with a resource of 0 is still a GPU node
	h.start()

	// Capacity from the nodes, reported and answered.
	h.eventually(10*time.Second, "capacity report", func() error {
		c := h.rep.LastCapacity()
		if c == nil || len(c.Nodes) != 2 {
			return fmt.Errorf("capacity %+v", c)
		}
		return nil
	})
	capa, err := h.w.Capacity(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := cosmic.Node{Name: h.nodeName(0), Rack: h.cfg.Rack, GPUModel: "GH100_H100_SXM5_80GB", GPUs: 8, CPUMilli: 128000, Schedulable: true, Ready: true}
	if i := slices.IndexFunc(capa.Nodes, func(n cosmic.Node) bool { return n.Name == want.Name }); i < 0 || capa.Nodes[i] != want {
		t.Fatalf("Capacity = %+v, want a node %+v", capa.Nodes, want)
	}

	job := containerJob("team-a")
	h.apply(job, h.reservation(job, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{3}}))
	// Idempotent.
	h.apply(job, h.reservation(job, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{3}}))

	name := VMIName(job.ID, 0, 0)
	wantObjs := map[string][]string{
		"ConfigMap":              {RootName(job.ID)},
		"Secret":                 {SecretName(job.ID, 0, 0)},
		"DataVolume":             {name},
		"VirtualMachineInstance": {name},
	}
	if diff := cmp.Diff(wantObjs, h.objectsOf(job.ID)); diff != "" {
		t.Fatalf("objects (-want +got):\n%s", diff)
	}
	// Owned by the root.
	var root corev1.ConfigMap
	if err := h.c.Get(h.ctx, h.key(RootName(job.ID)), &root); err != nil {
		t.Fatal(err)
	}
	v := h.vmi(name)
	if len(v.OwnerReferences) != 1 || v.OwnerReferences[0].UID != root.UID {
		t.Fatalf("VMI owners %+v, want the root %s", v.OwnerReferences, root.UID)
	}
	if got := len(v.Spec.Domain.Devices.GPUs); got != 1 {
		t.Fatalf("VMI has %d GPUs", got)
	}
	if v.Annotations[AnnotationNode] != h.nodeName(0) || v.Annotations[AnnotationGPUs] != "3" {
		t.Fatalf("VMI annotations %v", v.Annotations)
	}
	// The VMI, as the apiserver stored it, boots UEFI without Secure Boot
	// and has the agent disk.
	if fw := v.Spec.Domain.Firmware; fw == nil || fw.Bootloader == nil || fw.Bootloader.EFI == nil || fw.Bootloader.EFI.SecureBoot == nil || *fw.Bootloader.EFI.SecureBoot {
		t.Fatalf("VMI firmware %+v, want EFI without secure boot", fw)
	}
	if i := slices.IndexFunc(v.Spec.Volumes, func(vol virtv1.Volume) bool { return vol.ContainerDisk != nil }); i < 0 || v.Spec.Volumes[i].ContainerDisk.Image != h.cfg.Images.AgentDisk {
		t.Fatalf("VMI volumes %+v, want the agent disk %s", v.Spec.Volumes, h.cfg.Images.AgentDisk)
	}
	// The user data on the cluster is vmboot's for the same VM, byte for
	// byte: what a QEMU rack (which calls vmboot too) boots with.
	var sec corev1.Secret
	if err := h.c.Get(h.ctx, h.key(SecretName(job.ID, 0, 0)), &sec); err != nil {
		t.Fatal(err)
	}
	ac, err := AgentConfigOf(sec.Data[UserDataKey])
	if err != nil {
		t.Fatal(err)
	}
	boot := vmboot.Bootstrap{Peers: h.w.peers()}
	if ac.Identity != nil {
		boot.Agents = []vmboot.AgentIdentity{*ac.Identity} // issued by the worker
	}
	wantUD, err := vmboot.UserData(vmboot.VM{Job: job, Replica: 0, Index: 0, Count: 1, GPUs: 1, Boot: boot,
		Agent: vmboot.Agent{Delivery: vmboot.DeliveryDisk}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(wantUD), string(sec.Data[UserDataKey])); diff != "" {
		t.Fatalf("user data on the cluster is not vmboot's (-vmboot +cluster):\n%s", diff)
	}

	h.waitReport(job.ID, 0, cosmic.StatePending, nil)
	h.setDV(name, cdiv1.ImportInProgress, "45.20%", 0)
	h.waitReport(job.ID, 0, cosmic.StateStarting, progressIs(StepImport, 45))
	h.setDV(name, cdiv1.Succeeded, "100.0%", 0)
	h.waitReport(job.ID, 0, cosmic.StateStarting, progressIs(StepSchedule, 0))
	h.setVMI(name, func(v *virtv1.VirtualMachineInstance) {
		v.Status.Phase, v.Status.NodeName = virtv1.Scheduled, h.nodeName(0)
	})
	h.waitReport(job.ID, 0, cosmic.StateStarting, progressIs(StepBoot, 0))
	h.setVMI(name, func(v *virtv1.VirtualMachineInstance) { v.Status.Phase = virtv1.Running })
	h.waitReport(job.ID, 0, cosmic.StateStarting, progressIs(StepBoot, 50))
	h.setVMI(name, running(h.nodeName(0)))
	r := h.waitReport(job.ID, 0, cosmic.StateRunning, nil)
	if !slices.Equal(r.Nodes, []string{h.nodeName(0)}) {
		t.Errorf("running report nodes %v", r.Nodes)
	}

	// Every report is a legal move.
	checkTransitions(t, h.rep.History(job.ID, 0))
	// Each step is a system log record.
	steps := h.steps(job.ID)
	for _, s := range []string{"accept", "pending", "import_disk", "schedule", "boot", "ready"} {
		if !slices.Contains(steps, s) {
			t.Errorf("no %q record; steps %v", s, steps)
		}
	}
	jobs, err := h.w.Jobs(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].JobID != job.ID || len(jobs[0].Replicas) != 1 || jobs[0].Replicas[0].State != cosmic.StateRunning {
		t.Fatalf("Jobs = %+v", jobs)
	}
	inUse, err := h.w.GPUsInUse(h.ctx)
	if err != nil || inUse[h.nodeName(0)] != 1 {
		t.Fatalf("GPUsInUse = %v, %v", inUse, err)
	}

	// A reservation the rack cannot build, and another reservation for a
	// live replica, are refused.
	bad := containerJob("team-a")
	err = h.w.Apply(h.ctx, worker.ApplyParams{Job: bad, Reservations: []cosmic.Reservation{h.reservation(bad, 0, cosmic.NodeAlloc{Node: "Not A Node", GPUs: []int{0}})}})
	if fabric.ErrorCode(err) != fabric.CodeBadRequest {
		t.Errorf("Apply of a bad node: %v, want bad_request", err)
	}
	err = h.w.Apply(h.ctx, worker.ApplyParams{Job: job, Reservations: []cosmic.Reservation{h.reservation(job, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{4}})}})
	if fabric.ErrorCode(err) != codeConflict {
		t.Errorf("Apply of another reservation: %v, want conflict", err)
	}
}

// checkTransitions fails if consecutive reports make an illegal move.
func checkTransitions(t *testing.T, h []worker.ReplicaReport) {
	t.Helper()
	for i := 1; i < len(h); i++ {
		a, b := h[i-1].State, h[i].State
		if a != b && !cosmic.CanTransition(a, b) {
			t.Errorf("report %d moves %s → %s (illegal); history %v", i, a, b, states(h))
		}
	}
}

func states(h []worker.ReplicaReport) []cosmic.State {
	out := make([]cosmic.State, len(h))
	for i, r := range h {
		out[i] = r.State
	}
	return out
}

func TestIntegrationImportFailure(t *testing.T) {
	h := newHarness(t, k8stest.Shared(t), nil)
	h.addNode(h.nodeName(0), 8)
	h.start()
	job := containerJob("team-a")
	h.apply(job, h.reservation(job, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{0}}))
	name := VMIName(job.ID, 0, 0)
	h.setDV(name, cdiv1.ImportInProgress, "10.00%", 0)
	h.waitReport(job.ID, 0, cosmic.StateStarting, progressIs(StepImport, 10))
	h.setDV(name, cdiv1.Failed, "10.00%", 0)
	r := h.waitReport(job.ID, 0, cosmic.StateFailed, reasonIs(cosmic.ReasonImportFailed))
	if !strings.Contains(r.Reason.Message, "404") {
		t.Errorf("reason %q does not carry CDI's message", r.Reason.Message)
	}
	// Its VMI is deleted (its GPUs go back); the disk and Secret are kept.
	h.eventually(10*time.Second, "VMI deleted", func() error {
		if o := h.objectsOf(job.ID); len(o["VirtualMachineInstance"]) > 0 || len(o["DataVolume"]) != 1 {
			return fmt.Errorf("objects %v", o)
		}
		return nil
	})
	// It stays failed once the worker has seen its VMI go (and Jobs says so).
	h.informed("the VMI gone", func(c client.Reader) error {
		var v virtv1.VirtualMachineInstance
		if err := c.Get(h.ctx, h.key(name), &v); !isNotFound(err) {
			return fmt.Errorf("VMI still there (%v)", err)
		}
		return nil
	})
	h.settle(job.ID, 0)
	if r, _ := h.rep.Last(job.ID, 0); r.State != cosmic.StateFailed {
		t.Fatalf("its VMI gone: %+v", r)
	}
	jobs, err := h.w.Jobs(h.ctx)
	if err != nil || len(jobs) != 1 || jobs[0].Replicas[0].State != cosmic.StateFailed || jobs[0].Replicas[0].Reason.Code != cosmic.ReasonImportFailed {
		t.Fatalf("Jobs = %+v, %v", jobs, err)
	}
	if !slices.ContainsFunc(h.logs.Job(job.ID), func(r joblogRecord) bool { return r.Step == "import_disk" && r.OK != nil && !*r.OK }) {
		t.Errorf("no failed import_disk record: %v", h.steps(job.ID))
	}

	// Importer restarts count as a failure too.
	job2 := containerJob("team-a")
	h.apply(job2, h.reservation(job2, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{1}}))
	h.setDV(VMIName(job2.ID, 0, 0), cdiv1.ImportInProgress, "0.00%", int32(h.cfg.ImportRestartLimit))
	h.waitReport(job2.ID, 0, cosmic.StateFailed, reasonIs(cosmic.ReasonImportFailed))

	// Applying the failed replica again starts it again (new VMI, same disk).
	dvUID := h.dv(name).UID
	h.setDV(name, cdiv1.Succeeded, "100.0%", 0)
	h.apply(job, h.reservation(job, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{2}}))
	h.vmi(name)
	h.setVMI(name, running(h.nodeName(0)))
	h.waitReport(job.ID, 0, cosmic.StateRunning, nil)
	if h.dv(name).UID != dvUID {
		t.Error("the DataVolume was replaced")
	}
}

func TestIntegrationUnschedulableVMI(t *testing.T) {
	h := newHarness(t, k8stest.Shared(t), func(c *RackConfig) { c.UnschedulableGrace = config.Duration(300 * time.Millisecond) })
	h.addNode(h.nodeName(0), 8)
	h.start()
	job := containerJob("team-a")
	h.apply(job, h.reservation(job, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{0}}))
	name := VMIName(job.ID, 0, 0)
	h.setDV(name, cdiv1.Succeeded, "100.0%", 0)
	h.waitReport(job.ID, 0, cosmic.StateStarting, progressIs(StepSchedule, 0))
	h.setVMI(name, func(v *virtv1.VirtualMachineInstance) {
		v.Status.Phase = virtv1.Pending
		v.Status.Conditions = []virtv1.VirtualMachineInstanceCondition{{
			Type: virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled), Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient " + string(h.resource()),
			LastTransitionTime: metav1.Now(),
		}}
	})
	// Within the grace it keeps starting; then it fails, with no further event.
	r := h.waitReport(job.ID, 0, cosmic.StateFailed, reasonIs(cosmic.ReasonVMIUnschedulable))
	if !strings.Contains(r.Reason.Message, "Insufficient") {
		t.Errorf("reason %q lacks the scheduler's message", r.Reason.Message)
	}
	h.eventually(10*time.Second, "VMI deleted", func() error {
		if o := h.objectsOf(job.ID); len(o["VirtualMachineInstance"]) > 0 {
			return fmt.Errorf("objects %v", o)
		}
		return nil
	})
}

func inferenceJob(replicas, gpusPerReplica int) cosmic.Job {
	s := cosmic.Spec{Type: cosmic.TypeManagedInference, Location: "us",
		Inference: &cosmic.InferenceSpec{Model: "Qwen/Qwen3-32B", Replicas: replicas, GPUsPerReplica: gpusPerReplica}}
	s.Default()
	return cosmic.NewJob(cosmic.NewJobID(), "ada@example.com", "ml", s, time.Now())
}

func TestIntegrationVMICrash(t *testing.T) {
	h := newHarness(t, k8stest.Shared(t), nil)
	h.addNode(h.nodeName(0), 8)
	h.start()

	// One replica: the job's replica fails.
	job := containerJob("team-a")
	h.apply(job, h.reservation(job, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{0}}))
	h.runReplica(job.ID, 0, h.nodeName(0))
	h.setVMI(VMIName(job.ID, 0, 0), func(v *virtv1.VirtualMachineInstance) {
		v.Status.Phase, v.Status.Reason = virtv1.Failed, "qemu exited"
	})
	r := h.waitReport(job.ID, 0, cosmic.StateFailed, reasonIs(cosmic.ReasonVMICrashed))
	if !strings.Contains(r.Reason.Message, "qemu exited") {
		t.Errorf("reason %q", r.Reason.Message)
	}

	// Two replicas, one crashes: it fails, the other keeps running (the
	// ork makes the job degraded).
	inf := inferenceJob(2, 2)
	h.apply(inf,
		h.reservation(inf, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{2, 3}}),
		h.reservation(inf, 1, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{4, 5}}))
	h.runReplica(inf.ID, 0, h.nodeName(0))
	h.runReplica(inf.ID, 1, h.nodeName(0))
	h.setVMI(VMIName(inf.ID, 1, 0), func(v *virtv1.VirtualMachineInstance) { v.Status.Phase = virtv1.Failed })
	h.waitReport(inf.ID, 1, cosmic.StateFailed, reasonIs(cosmic.ReasonVMICrashed))
	if r, _ := h.rep.Last(inf.ID, 0); r.State != cosmic.StateRunning {
		t.Errorf("replica 0 is %s, want running", r.State)
	}
	jobs, err := h.w.Jobs(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(jobs, func(j worker.JobReport) bool { return j.JobID == inf.ID })
	if i < 0 || len(jobs[i].Replicas) != 2 || jobs[i].Replicas[0].State != cosmic.StateRunning || jobs[i].Replicas[1].State != cosmic.StateFailed {
		t.Fatalf("Jobs = %+v", jobs)
	}
}

func TestIntegrationRestartKeepsDisk(t *testing.T) {
	h := newHarness(t, k8stest.Shared(t), nil)
	h.addNode(h.nodeName(0), 8)
	h.start()
	job := containerJob("team-a")
	h.apply(job, h.reservation(job, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{0}}))
	name := VMIName(job.ID, 0, 0)
	h.runReplica(job.ID, 0, h.nodeName(0))
	oldVMI, dvUID := h.vmi(name).UID, h.dv(name).UID

	if err := h.w.Restart(h.ctx, worker.ReplicaRef{JobID: job.ID, Replica: worker.AllReplicas}); err != nil {
		t.Fatal(err)
	}
	h.waitReport(job.ID, 0, cosmic.StateRestarting, nil)
	var newVMI *virtv1.VirtualMachineInstance
	h.eventually(10*time.Second, "a new VMI", func() error {
		newVMI = h.vmi(name)
		if newVMI.UID == oldVMI {
			return errors.New("still the old VMI")
		}
		return nil
	})
	if h.dv(name).UID != dvUID {
		t.Fatal("restart replaced the DataVolume")
	}
	if newVMI.Annotations[AnnotationGPUs] != "0" || newVMI.Annotations[AnnotationNode] != h.nodeName(0) {
		t.Fatalf("new VMI's reservation %v", newVMI.Annotations)
	}
	// Restarting until the new VMI runs: the worker, having seen it, judges
	// the replica restarting.
	h.informed("the new VMI", func(c client.Reader) error {
		var v virtv1.VirtualMachineInstance
		if err := c.Get(h.ctx, h.key(name), &v); err != nil || v.UID != newVMI.UID {
			return fmt.Errorf("VMI %s (%v), want %s", v.UID, err, newVMI.UID)
		}
		return nil
	})
	h.settle(job.ID, 0)
	if r, _ := h.rep.Last(job.ID, 0); r.State != cosmic.StateRestarting {
		t.Fatalf("before the new VMI runs: %s", r.State)
	}
	h.setVMI(name, running(h.nodeName(0)))
	h.waitReport(job.ID, 0, cosmic.StateRunning, nil)
	checkTransitions(t, h.rep.History(job.ID, 0))

	// Restart of an unknown job or replica.
	if err := h.w.Restart(h.ctx, worker.ReplicaRef{JobID: cosmic.NewJobID(), Replica: worker.AllReplicas}); fabric.ErrorCode(err) != fabric.CodeNotFound {
		t.Errorf("restart of an unknown job: %v", err)
	}
}

func TestIntegrationStopAndDelete(t *testing.T) {
	h := newHarness(t, k8stest.Shared(t), nil)
	h.addNode(h.nodeName(0), 8)
	h.start()
	job := inferenceJob(1, 2)
	job.Spec.DefaultHTTPPort = 8000
	h.apply(job, h.reservation(job, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{0, 1}}))
	h.runReplica(job.ID, 0, h.nodeName(0))

	// Stop: the VMI goes, the disk stays; stopped (killed).
	if err := h.w.Stop(h.ctx, worker.ReplicaRef{JobID: job.ID, Replica: worker.AllReplicas}); err != nil {
		t.Fatal(err)
	}
	h.waitReport(job.ID, 0, cosmic.StateStopped, reasonIs(cosmic.ReasonKilled))
	h.eventually(10*time.Second, "VMI deleted, disk kept", func() error {
		if o := h.objectsOf(job.ID); len(o["VirtualMachineInstance"]) > 0 || len(o["DataVolume"]) != 1 || len(o["Service"]) != 1 {
			return fmt.Errorf("objects %v", o)
		}
		return nil
	})

	// Delete: everything goes, the replica is reported Gone.
	if err := h.w.Delete(h.ctx, worker.DeleteParams{JobID: job.ID, Replica: worker.AllReplicas}); err != nil {
		t.Fatal(err)
	}
	h.eventually(10*time.Second, "Gone", func() error {
		if r, _ := h.rep.Last(job.ID, 0); !r.Gone {
			return fmt.Errorf("last report %+v; history %v; objects %v", r, states(h.rep.History(job.ID, 0)), h.objectsOf(job.ID))
		}
		return nil
	})
	if o := h.objectsOf(job.ID); len(o) > 0 {
		t.Fatalf("objects left after Gone: %v", o)
	}
	jobs, err := h.w.Jobs(h.ctx)
	if err != nil || len(jobs) != 0 {
		t.Fatalf("Jobs = %+v, %v", jobs, err)
	}

	// Force delete of a running two-replica job; per-replica delete first.
	inf := inferenceJob(2, 1)
	h.apply(inf,
		h.reservation(inf, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{2}}),
		h.reservation(inf, 1, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{3}}))
	h.runReplica(inf.ID, 0, h.nodeName(0))
	if err := h.w.Delete(h.ctx, worker.DeleteParams{JobID: inf.ID, Replica: 1, Force: true}); err != nil {
		t.Fatal(err)
	}
	h.eventually(10*time.Second, "replica 1 Gone", func() error {
		if r, _ := h.rep.Last(inf.ID, 1); !r.Gone {
			return fmt.Errorf("last report %+v", r)
		}
		return nil
	})
	if o := h.objectsOf(inf.ID); len(o["VirtualMachineInstance"]) != 1 || len(o["ConfigMap"]) != 1 {
		t.Fatalf("replica 0's objects and the root should stay: %v", o)
	}
	if err := h.w.Delete(h.ctx, worker.DeleteParams{JobID: inf.ID, Replica: worker.AllReplicas, Force: true}); err != nil {
		t.Fatal(err)
	}
	h.eventually(10*time.Second, "replica 0 Gone", func() error {
		if r, _ := h.rep.Last(inf.ID, 0); !r.Gone {
			return fmt.Errorf("last report %+v", r)
		}
		return nil
	})
	if o := h.objectsOf(inf.ID); len(o) > 0 {
		t.Fatalf("objects left: %v", o)
	}
	// Deleting again, or an unknown replica, succeeds (a named one is Gone).
	if err := h.w.Delete(h.ctx, worker.DeleteParams{JobID: inf.ID, Replica: 5}); err != nil {
		t.Fatal(err)
	}
	h.eventually(5*time.Second, "unknown replica Gone", func() error {
		if r, _ := h.rep.Last(inf.ID, 5); !r.Gone {
			return fmt.Errorf("last report %+v", r)
		}
		return nil
	})
}

func TestIntegrationVLLM16GPUsOnTwoNodes(t *testing.T) {
	env := k8stest.Shared(t)
	h := newHarness(t, env, func(c *RackConfig) {
		c.Networks = Networks{InfiniBand: []string{"ib-rail-0", "ib-rail-1"}, Overlay: "cosmicac-overlay"}
	})
	for _, n := range []string{"ib-rail-0", "ib-rail-1", "cosmicac-overlay"} {
		nad := &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: h.cfg.Namespace, Name: n}}
		if err := h.c.Create(h.ctx, nad); err != nil {
			t.Fatal(err)
		}
	}
	h.addNode(h.nodeName(0), 8)
	h.addNode(h.nodeName(1), 8)
	h.start()
	s := cosmic.Spec{Type: cosmic.TypeManagedInference, Location: "us", Inference: &cosmic.InferenceSpec{Model: "deepseek-ai/DeepSeek-V3", GPUsPerReplica: 16}}
	s.Default()
	job := cosmic.NewJob(cosmic.NewJobID(), "ada@example.com", "ml", s, time.Now())
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	h.apply(job, h.reservation(job, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: all}, cosmic.NodeAlloc{Node: h.nodeName(1), GPUs: all}))
	o := h.objectsOf(job.ID)
	if len(o["VirtualMachineInstance"]) != 2 || len(o["DataVolume"]) != 2 || len(o["Secret"]) != 2 || !slices.Contains(o["Service"], ReplicaName(job.ID, 0)) {
		t.Fatalf("objects %v", o)
	}
	for i := range 2 {
		v := h.vmi(VMIName(job.ID, 0, i))
		if len(v.Spec.Domain.Devices.GPUs) != 8 {
			t.Errorf("VMI %d has %d GPUs", i, len(v.Spec.Domain.Devices.GPUs))
		}
		var nets []string
		for _, n := range v.Spec.Networks {
			if n.Multus != nil {
				nets = append(nets, n.Name+"="+n.Multus.NetworkName)
			}
		}
		want := []string{"overlay=" + h.cfg.Namespace + "/cosmicac-overlay", "ib0=" + h.cfg.Namespace + "/ib-rail-0", "ib1=" + h.cfg.Namespace + "/ib-rail-1"}
		if !slices.Equal(nets, want) {
			t.Errorf("VMI %d networks %v, want %v", i, nets, want)
		}
		terms := v.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if terms[0].MatchFields[0].Values[0] != h.nodeName(i) {
			t.Errorf("VMI %d pinned to %v", i, terms[0].MatchFields[0].Values)
		}
		if v.Spec.Subdomain != ReplicaName(job.ID, 0) {
			t.Errorf("VMI %d subdomain %q", i, v.Spec.Subdomain)
		}
	}
	// One VMI running is not enough.
	h.setDV(VMIName(job.ID, 0, 0), cdiv1.Succeeded, "100.0%", 0)
	h.setVMI(VMIName(job.ID, 0, 0), running(h.nodeName(0)))
	h.setDV(VMIName(job.ID, 0, 1), cdiv1.ImportInProgress, "70.0%", 0)
	h.waitReport(job.ID, 0, cosmic.StateStarting, progressIs(StepImport, 70))
	h.runReplica(job.ID, 0, h.nodeName(0), h.nodeName(1))
	r, _ := h.rep.Last(job.ID, 0)
	if !slices.Equal(r.Nodes, []string{h.nodeName(0), h.nodeName(1)}) {
		t.Errorf("nodes %v", r.Nodes)
	}
	inUse, _ := h.w.GPUsInUse(h.ctx)
	if inUse[h.nodeName(0)] != 8 || inUse[h.nodeName(1)] != 8 {
		t.Errorf("GPUsInUse %v", inUse)
	}
}

func TestIntegrationWorkerRestartMidFlight(t *testing.T) {
	h := newHarness(t, k8stest.Shared(t), nil)
	h.addNode(h.nodeName(0), 8)
	h.start()
	a, b, c := containerJob("team-a"), containerJob("team-b"), containerJob("team-c")
	for i, j := range []cosmic.Job{a, b, c} {
		h.apply(j, h.reservation(j, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{i}}))
	}
	h.runReplica(a.ID, 0, h.nodeName(0))
	h.runReplica(c.ID, 0, h.nodeName(0))
	if err := h.w.Restart(h.ctx, worker.ReplicaRef{JobID: c.ID, Replica: 0}); err != nil {
		t.Fatal(err)
	}
	h.waitReport(c.ID, 0, cosmic.StateRestarting, nil)
	oldA := h.vmi(VMIName(a.ID, 0, 0)).UID
	h.stop()

	// While the worker is away: a's VMI is deleted behind its back, b's
	// disk is imported and its VMI boots, c's replacement VMI is made.
	if err := h.c.Delete(h.ctx, h.vmi(VMIName(a.ID, 0, 0))); err != nil {
		t.Fatal(err)
	}
	h.setDV(VMIName(b.ID, 0, 0), cdiv1.Succeeded, "100.0%", 0)
	h.setVMI(VMIName(b.ID, 0, 0), running(h.nodeName(0)))

	h.start()
	// a: drift repaired by recreating its VMI (restarting meanwhile).
	h.waitReport(a.ID, 0, cosmic.StateRestarting, nil)
	h.eventually(10*time.Second, "a's VMI recreated", func() error {
		if v := h.vmi(VMIName(a.ID, 0, 0)); v.UID == oldA {
			return errors.New("old VMI")
		}
		return nil
	})
	h.setVMI(VMIName(a.ID, 0, 0), running(h.nodeName(0)))
	h.waitReport(a.ID, 0, cosmic.StateRunning, nil)
	// b: running, learnt from the cluster alone.
	h.waitReport(b.ID, 0, cosmic.StateRunning, nil)
	// c: the restart goes on where it was.
	h.setVMI(VMIName(c.ID, 0, 0), running(h.nodeName(0)))
	h.waitReport(c.ID, 0, cosmic.StateRunning, nil)
	jobs, err := h.w.Jobs(h.ctx)
	if err != nil || len(jobs) != 3 {
		t.Fatalf("Jobs = %+v, %v", jobs, err)
	}
	for _, j := range jobs {
		if j.Replicas[0].State != cosmic.StateRunning {
			t.Errorf("job %s is %s", j.JobID, j.Replicas[0].State)
		}
	}
	// A restarted worker still refuses another reservation for a live replica.
	err = h.w.Apply(h.ctx, worker.ApplyParams{Job: a, Reservations: []cosmic.Reservation{h.reservation(a, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{7}})}})
	if fabric.ErrorCode(err) != codeConflict {
		t.Errorf("Apply of another reservation after a restart: %v", err)
	}
}

func TestIntegrationDriftFail(t *testing.T) {
	h := newHarness(t, k8stest.Shared(t), func(c *RackConfig) { c.DriftPolicy = DriftFail })
	h.addNode(h.nodeName(0), 8)
	h.start()
	job := containerJob("team-a")
	h.apply(job, h.reservation(job, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{0}}))
	h.runReplica(job.ID, 0, h.nodeName(0))
	if err := h.c.Delete(h.ctx, h.vmi(VMIName(job.ID, 0, 0))); err != nil {
		t.Fatal(err)
	}
	r := h.waitReport(job.ID, 0, cosmic.StateFailed, reasonIs(cosmic.ReasonVMICrashed))
	if !strings.Contains(r.Reason.Message, "outside CosmicAC") {
		t.Errorf("reason %q", r.Reason.Message)
	}
	// Not recreated: the worker, having seen the failure recorded, judges
	// the replica again and makes no VMI.
	h.informed("the replica recorded failed", func(c client.Reader) error {
		var s corev1.Secret
		if err := c.Get(h.ctx, h.key(SecretName(job.ID, 0, 0)), &s); err != nil {
			return err
		}
		if st, _ := stateOf(&s); st.Desired != desiredFailed {
			return fmt.Errorf("state %+v", st)
		}
		return nil
	})
	h.settle(job.ID, 0)
	if o := h.objectsOf(job.ID); len(o["VirtualMachineInstance"]) > 0 {
		t.Fatalf("the VMI was recreated: %v", o)
	}
}

// TestIntegrationAPIServerOutage stops the apiserver (etcd keeps running)
// while the worker's informers hold watches, and starts it again: while it
// is away the worker answers unavailable (the ork marks the rack's jobs
// unknown) and reports nothing, in particular not failed; once it is back
// the worker relists, reports the jobs as they are, and works again.
func TestIntegrationAPIServerOutage(t *testing.T) {
	env := k8stest.Shared(t)
	h := newHarness(t, env, nil)
	h.addNode(h.nodeName(0), 8)
	h.start()
	crash, stay := containerJob("team-a"), containerJob("team-a")
	h.apply(crash, h.reservation(crash, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{0}}))
	h.apply(stay, h.reservation(stay, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{1}}))
	h.runReplica(crash.ID, 0, h.nodeName(0))
	h.runReplica(stay.ID, 0, h.nodeName(0))
	beforeCrash, beforeStay := len(h.rep.History(crash.ID, 0)), len(h.rep.History(stay.ID, 0))

	mark := h.requests.mark()
	t0 := time.Now()
	if err := env.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	up := false
	t.Cleanup(func() { // the shared apiserver serves the next tests
		if !up {
			if err := env.StartAPIServer(); err != nil {
				t.Error(err)
			}
		}
	})
	t.Logf("apiserver stopped (the worker's watches open) in %v", time.Since(t0).Round(time.Millisecond))
	j2, res2 := h.assertUnavailable()
	// The informers' watches fail and are retried, failing again; the
	// replicas are judged meanwhile: nothing is reported.
	h.waitFailed(mark, informerResources...)
	h.settle(crash.ID, 0)
	h.settle(stay.ID, 0)
	for _, r := range append(h.rep.History(crash.ID, 0)[beforeCrash:], h.rep.History(stay.ID, 0)[beforeStay:]...) {
		t.Errorf("reported %+v during the outage", r)
	}
	if _, err := h.w.Jobs(h.ctx); fabric.ErrorCode(err) != fabric.CodeUnavailable {
		t.Fatalf("Jobs with the informers failing: %v, want unavailable", err)
	}

	t0 = time.Now()
	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	up = true
	t.Logf("apiserver started again in %v", time.Since(t0).Round(time.Millisecond))
	h.assertAnswersAgain()
	t.Logf("the worker answers again %v after the start", time.Since(t0).Round(time.Millisecond))
	// Nothing changed on the cluster: the jobs are still running, and the
	// relist reports nothing else.
	jobs, err := h.w.Jobs(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{crash.ID, stay.ID} {
		i := slices.IndexFunc(jobs, func(j worker.JobReport) bool { return j.JobID == id })
		if i < 0 || len(jobs[i].Replicas) != 1 || jobs[i].Replicas[0].State != cosmic.StateRunning {
			t.Fatalf("Jobs after the outage: %s is %+v, want running", id, jobs)
		}
	}
	// Once every informer has caught up (a mark on each kind of the jobs'
	// objects shows) and the replicas are judged again, still nothing else.
	for _, id := range []string{crash.ID, stay.ID} {
		h.touchReplica(id)
		h.settle(id, 0)
	}
	for _, r := range append(h.rep.History(crash.ID, 0)[beforeCrash:], h.rep.History(stay.ID, 0)[beforeStay:]...) {
		if r.State != cosmic.StateRunning {
			t.Errorf("reported %+v after the outage, nothing changed", r)
		}
	}
	// The watches work again: a crash now is reported, and the worker applies.
	h.setVMI(VMIName(crash.ID, 0, 0), func(v *virtv1.VirtualMachineInstance) { v.Status.Phase = virtv1.Failed })
	h.waitReport(crash.ID, 0, cosmic.StateFailed, reasonIs(cosmic.ReasonVMICrashed))
	h.eventually(30*time.Second, "Apply after the outage", func() error {
		return h.w.Apply(h.ctx, worker.ApplyParams{Job: j2, Reservations: []cosmic.Reservation{res2}})
	})
	h.waitReport(j2.ID, 0, cosmic.StatePending, nil)
	if r, _ := h.rep.Last(stay.ID, 0); r.State != cosmic.StateRunning {
		t.Fatalf("the job left alone: %+v", r)
	}
}

// TestIntegrationAPIServerPartition cuts the worker off an apiserver that
// keeps running, and reconnects it: the worker reaches the apiserver through
// a TCP proxy that closes its connections and stops listening (connection
// refused), then listens again on the same port. Unlike a stopped apiserver,
// the cluster goes on meanwhile: a VMI crash during the partition is
// reported once the worker sees the cluster again, not before.
func TestIntegrationAPIServerPartition(t *testing.T) {
	env := k8stest.Shared(t)
	h := newHarness(t, env, nil)
	proxy := newCutProxy(t, env.Config.Host)
	h.restCfg = rest.CopyConfig(env.Config)
	h.restCfg.Host = "https://" + proxy.addr
	h.addNode(h.nodeName(0), 8)
	h.start()
	job := containerJob("team-a")
	h.apply(job, h.reservation(job, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{0}}))
	h.runReplica(job.ID, 0, h.nodeName(0))
	before := len(h.rep.History(job.ID, 0))

	proxy.cut()
	j2, res2 := h.assertUnavailable()
	// Meanwhile the cluster goes on: the VMI crashes. Nothing is reported
	// while the worker cannot see it.
	h.setVMI(VMIName(job.ID, 0, 0), func(v *virtv1.VirtualMachineInstance) { v.Status.Phase = virtv1.Failed })
	// The informers retry their watches and fail (after the crash, so it
	// cannot have been seen), and the replica is judged meanwhile.
	h.waitFailed(h.requests.mark(), informerResources...)
	h.settle(job.ID, 0)
	for _, r := range h.rep.History(job.ID, 0)[before:] {
		t.Errorf("reported %+v during the outage", r)
	}

	proxy.restore()
	h.assertAnswersAgain()
	if _, err := h.w.Jobs(h.ctx); err != nil {
		t.Fatalf("Jobs after the outage: %v", err)
	}
	// Back, the worker sees the crash and reports it; and works again.
	h.waitReport(job.ID, 0, cosmic.StateFailed, reasonIs(cosmic.ReasonVMICrashed))
	h.eventually(30*time.Second, "Apply after the outage", func() error {
		return h.w.Apply(h.ctx, worker.ApplyParams{Job: j2, Reservations: []cosmic.Reservation{res2}})
	})
	h.waitReport(j2.ID, 0, cosmic.StatePending, nil)
}

// cutProxy forwards TCP connections to an apiserver; cut closes them and
// stops listening, restore listens again on the same address.
type cutProxy struct {
	t      testing.TB
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]bool
}

func newCutProxy(t testing.TB, host string) *cutProxy {
	u, err := url.Parse(host)
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{t: t, target: u.Host, conns: map[net.Conn]bool{}}
	p.listen("127.0.0.1:0")
	t.Cleanup(p.cut)
	return p
}

func (p *cutProxy) listen(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = true, true
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close(); c.Close() }()
			go func() { io.Copy(c, up); up.Close(); c.Close() }()
		}
	}()
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *cutProxy) restore() { p.listen(p.addr) }
