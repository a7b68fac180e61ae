package k8sworker

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/k8stest"
	"github.com/cosmicac/cosmicac/internal/vmboot"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// A job's standalone volume on a Kubernetes rack: Apply makes its blank
// DataVolume (owned by no job) and the VMI attaches it by serial; Capacity
// reports it with the job while the job's VMI exists, being deleted
// included, and without once the VMI is gone (answered and pushed);
// deleting the job leaves the volume, and the next job that mounts it gets
// the same one. DeleteVolume refuses the volume while a VMI has it (a
// conflict naming the job), finds no other team's, and deletes it once
// the VMIs are gone.
func TestIntegrationStandaloneVolume(t *testing.T) {
	h := newHarness(t, k8stest.Shared(t), nil)
	h.addNode(h.nodeName(0), 8)
	h.start()

	withVolume := func() cosmic.Job {
		j := containerJob("ml")
		j.Spec.Volumes = []cosmic.Volume{{MountPath: "/scratch", Permission: cosmic.PermissionRW,
			Source: cosmic.VolumeSource{Standalone: &cosmic.StandaloneSource{Name: "scratch"}}}}
		return j
	}
	job := withVolume()
	h.apply(job, h.reservation(job, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{0}}))
	name := StandaloneVolumeName("ml", "scratch")
	dv := h.dv(name)
	if len(dv.OwnerReferences) > 0 || dv.Labels[LabelJob] != "" || dv.Spec.Source == nil || dv.Spec.Source.Blank == nil {
		t.Fatalf("standalone DataVolume %+v", dv.ObjectMeta)
	}
	vmiName := VMIName(job.ID, 0, 0)
	v := h.vmi(vmiName)
	if i := slices.IndexFunc(v.Spec.Domain.Devices.Disks, func(d virtv1.Disk) bool { return d.Serial == vmboot.StandaloneSerial(0) }); i < 0 {
		t.Fatalf("VMI disks %+v: none with serial %s", v.Spec.Domain.Devices.Disks, vmboot.StandaloneSerial(0))
	}
	h.runReplica(job.ID, 0, h.nodeName(0))

	size := int64(vmboot.StandaloneVolumeGiB) << 30
	volumesAre := func(want []cosmic.StoredVolume) func() error {
		return func() error {
			c, err := h.w.Capacity(h.ctx)
			if err != nil {
				return err
			}
			if !slices.Equal(c.Volumes, want) {
				return fmt.Errorf("Capacity volumes %+v, want %+v", c.Volumes, want)
			}
			if p := h.rep.LastCapacity(); p == nil || !slices.Equal(p.Volumes, want) {
				return fmt.Errorf("pushed capacity %+v, want volumes %+v", p, want)
			}
			return nil
		}
	}
	held := []cosmic.StoredVolume{{Team: "ml", Name: "scratch", Size: size, Job: job.ID}}
	h.eventually(10*time.Second, "the volume reported held by the job", volumesAre(held))

	// Stop: the VMI is deleted but stays while its VM powers off (a
	// finalizer plays virt-launcher); the volume is the job's until it is
	// gone.
	h.setVMI(vmiName, func(v *virtv1.VirtualMachineInstance) {
		v.Finalizers = append(v.Finalizers, "test.cosmicac.io/powering-off")
	})
	if err := h.w.Stop(h.ctx, worker.ReplicaRef{JobID: job.ID, Replica: worker.AllReplicas}); err != nil {
		t.Fatal(err)
	}
	h.eventually(10*time.Second, "the VMI being deleted", func() error {
		if v := h.vmi(vmiName); v.DeletionTimestamp == nil {
			return fmt.Errorf("VMI %s not being deleted", vmiName)
		}
		return nil
	})
	h.touch(&virtv1.VirtualMachineInstance{ObjectMeta: h.vmi(vmiName).ObjectMeta})
	if err := volumesAre(held)(); err != nil {
		t.Fatalf("while the VMI powers off: %v", err)
	}
	ref := worker.VolumeRef{Team: "ml", Name: "scratch"}
	if err := h.w.DeleteVolume(h.ctx, ref); !errors.Is(err, cosmic.ErrConflict) || !strings.Contains(err.Error(), job.ID) {
		t.Fatalf("DeleteVolume while the VMI powers off: %v, want a conflict naming job %s", err, job.ID)
	}
	h.setVMI(vmiName, func(v *virtv1.VirtualMachineInstance) { v.Finalizers = nil })
	free := []cosmic.StoredVolume{{Team: "ml", Name: "scratch", Size: size}}
	h.eventually(10*time.Second, "the volume reported free", volumesAre(free))

	// Delete: the job's objects go, the volume stays.
	if err := h.w.Delete(h.ctx, worker.DeleteParams{JobID: job.ID, Replica: worker.AllReplicas}); err != nil {
		t.Fatal(err)
	}
	h.eventually(10*time.Second, "Gone", func() error {
		if r, _ := h.rep.Last(job.ID, 0); !r.Gone {
			return fmt.Errorf("last report %+v; objects %v", r, h.objectsOf(job.ID))
		}
		return nil
	})
	var after cdiv1.DataVolume
	if err := h.c.Get(h.ctx, h.key(name), &after); err != nil || after.UID != dv.UID || after.DeletionTimestamp != nil {
		t.Fatalf("standalone DataVolume after the job's delete: %v (deleting %v)", err, after.DeletionTimestamp)
	}
	if err := volumesAre(free)(); err != nil {
		t.Fatal(err)
	}

	// The next job that mounts it gets the same DataVolume; DeleteVolume
	// refuses it as soon as the job's VMI is on the apiserver (it reads
	// the apiserver, not the informers).
	next := withVolume()
	h.apply(next, h.reservation(next, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{1}}))
	h.vmi(VMIName(next.ID, 0, 0))
	if err := h.w.DeleteVolume(h.ctx, ref); !errors.Is(err, cosmic.ErrConflict) || !strings.Contains(err.Error(), next.ID) {
		t.Fatalf("DeleteVolume while the next job's VMI attaches it: %v, want a conflict naming job %s", err, next.ID)
	}
	if err := h.c.Get(h.ctx, h.key(name), &after); err != nil || after.UID != dv.UID {
		t.Fatalf("standalone DataVolume for the next job: UID %s, was %s: %v", after.UID, dv.UID, err)
	}
	h.eventually(10*time.Second, "the volume reported held by the next job",
		volumesAre([]cosmic.StoredVolume{{Team: "ml", Name: "scratch", Size: size, Job: next.ID}}))
	if err := h.w.Delete(h.ctx, worker.DeleteParams{JobID: next.ID, Replica: worker.AllReplicas, Force: true}); err != nil {
		t.Fatal(err)
	}
	h.eventually(10*time.Second, "next job Gone", func() error {
		if r, _ := h.rep.Last(next.ID, 0); !r.Gone {
			return fmt.Errorf("last report %+v", r)
		}
		return nil
	})
	if err := h.c.Get(h.ctx, h.key(name), &after); apierrors.IsNotFound(err) {
		t.Fatal("the standalone DataVolume went with the job")
	}

	// DeleteVolume: another team's volume of the same name is not the
	// rack's; this one, held by no VMI now, goes. The DataVolume has no
	// finalizer (nothing here runs CDI), so the apiserver removes it at
	// once; Capacity drops it, answered and pushed.
	for _, other := range []worker.VolumeRef{{Team: "other", Name: "scratch"}, {Team: "ml", Name: "other"}} {
		if err := h.w.DeleteVolume(h.ctx, other); !errors.Is(err, cosmic.ErrNotFound) {
			t.Fatalf("DeleteVolume(%+v) = %v, want not found", other, err)
		}
	}
	if err := h.c.Get(h.ctx, h.key(name), &after); err != nil || after.UID != dv.UID || after.DeletionTimestamp != nil {
		t.Fatalf("standalone DataVolume after the refused deletes: %v (deleting %v)", err, after.DeletionTimestamp)
	}
	if err := h.w.DeleteVolume(h.ctx, ref); err != nil {
		t.Fatalf("DeleteVolume once no VMI has it: %v", err)
	}
	if err := h.c.Get(h.ctx, h.key(name), &after); !apierrors.IsNotFound(err) {
		t.Fatalf("standalone DataVolume after DeleteVolume: %v (deleting %v, finalizers %v)", err, after.DeletionTimestamp, after.Finalizers)
	}
	h.eventually(10*time.Second, "the volume no longer reported", volumesAre(nil))
	if err := h.w.DeleteVolume(h.ctx, ref); !errors.Is(err, cosmic.ErrNotFound) {
		t.Fatalf("second DeleteVolume: %v, want not found", err)
	}
}
