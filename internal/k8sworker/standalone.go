package k8sworker

// Standalone volumes (docs/data.md, "Standalone volumes"): a named volume
// of a team that outlives the jobs that mount it. On a Kubernetes rack it
// is a blank CDI DataVolume (and so a PVC) in the rack's namespace, named
// after the team and the volume, owned by no job: Apply makes it the
// first time a job mounts it, Delete never takes it. Each VMI of a job
// that mounts one gets it as a virtio disk whose serial is
// vmboot.StandaloneSerial of the volume's index, where the agent finds
// it (/dev/disk/by-id/virtio-SERIAL), makes a file system on it the
// first time and mounts it. Capacity lists the volumes, each with the job
// whose VMI has it, so that the ork places a job that mounts one here and
// only once no other job's VMI is left with it.

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/vmboot"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// The label and annotations of a standalone volume's DataVolume. Team and
// volume names need not be valid label values, so they are annotations
// (AnnotationTeam and AnnotationVolume, always set); the label is what the
// worker lists the volumes by.
const (
	// LabelStandaloneVolume is "true" on every standalone volume's
	// DataVolume.
	LabelStandaloneVolume = "cosmicac.io/standalone-volume"
	// AnnotationVolume is the volume's name (spec.volumes[].volumeSource
	// .standalone.name) on its DataVolume; AnnotationTeam is its team's.
	AnnotationVolume = "cosmicac.io/volume"
)

// standaloneDiskPrefix starts the name of a VMI's disk and volume that
// attach a standalone volume ("standalone-<volume index>"): the worker
// tells by it which VMIs hold standalone volumes.
const standaloneDiskPrefix = "standalone-"

// standaloneHashLen is the length of the hash that ends a standalone
// volume's DataVolume name (hex digits: 40 bits).
const standaloneHashLen = 10

// StandaloneVolumeName is the name of the DataVolume (and so of the PVC)
// of team's standalone volume name: "cv-", the team and the name in
// lowercase with every other character a '-' (cut so that the whole fits
// 63 characters), then '-' and a hash of the exact team and name. The
// hash is always there: lowercasing and the '-' that joins the two make
// the readable part ambiguous ("ML"/"a" and "ml"/"a"; "a-b"/"c" and
// "a"/"b-c"), and a team may be named in characters none of which
// survive. The result is a DNS-1123 label.
func StandaloneVolumeName(team, name string) string {
	sum := sha256.Sum256([]byte(team + "\x00" + name)) // a team may hold '/', a NUL in neither
	hash := hex.EncodeToString(sum[:])[:standaloneHashLen]
	const prefix = "cv-"
	room := 63 - len(prefix) - 1 - standaloneHashLen
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(team + "-" + name) {
		if ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
			continue
		}
		dash = true
	}
	slug := b.String()
	if len(slug) > room {
		slug = strings.TrimRight(slug[:room], "-")
	}
	if slug == "" {
		return prefix + hash
	}
	return prefix + slug + "-" + hash
}

// buildStandaloneVolumes builds the DataVolume of each standalone volume
// of job, in the order of spec.volumes.
func buildStandaloneVolumes(cfg RackConfig, job cosmic.Job) []*cdiv1.DataVolume {
	var out []*cdiv1.DataVolume
	for _, name := range job.Spec.StandaloneVolumes() {
		out = append(out, BuildStandaloneVolume(cfg, job.Team, name))
	}
	return out
}

// BuildStandaloneVolume builds the DataVolume of team's standalone volume
// name: blank (CDI makes an empty disk image of vmboot.StandaloneVolumeGiB,
// sparse where the storage allows), on the rack's storage class as the
// root disks are, in the rack's namespace. It has no owner: it outlives
// every job that mounts it. CDI's garbage collection must not take it once
// made (AnnotationCDIDeleteAfterCompletion), or the worker would make it
// again, and CDI refuses a DataVolume over a PVC it did not make.
func BuildStandaloneVolume(cfg RackConfig, team, name string) *cdiv1.DataVolume {
	tl, _ := teamLabel(team)
	st := &cdiv1.StorageSpec{
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceStorage: *resource.NewQuantity(int64(vmboot.StandaloneVolumeGiB)<<30, resource.BinarySI),
		}},
	}
	if cfg.StorageClassName != "" {
		st.StorageClassName = new(cfg.StorageClassName)
	}
	return &cdiv1.DataVolume{
		TypeMeta: metav1.TypeMeta{APIVersion: cdiv1.SchemeGroupVersion.String(), Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      StandaloneVolumeName(team, name),
			Namespace: cfg.Namespace,
			Labels: map[string]string{
				LabelStandaloneVolume: "true",
				LabelTeam:             tl,
				LabelManagedBy:        ManagedBy,
			},
			Annotations: map[string]string{
				AnnotationTeam:                     team,
				AnnotationVolume:                   name,
				AnnotationCDIDeleteAfterCompletion: "false",
			},
		},
		Spec: cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}},
			Storage: st,
		},
	}
}

// standaloneDisks are the disks and volumes that attach job's standalone
// volumes to its VMI: per volume (vmboot.Volumes, as the agent's bootstrap
// lists them) a virtio disk of its DataVolume, read-only when the volume
// is, with the serial the agent looks for. The serial is KubeVirt's
// Disk.Serial (kubevirt.io/api core/v1, "serial": "the ability to specify
// a serial number for the disk device"), which libvirt passes to QEMU's
// virtio-blk device; the guest shows it as /dev/disk/by-id/virtio-SERIAL.
func standaloneDisks(job cosmic.Job) ([]virtv1.Disk, []virtv1.Volume) {
	var disks []virtv1.Disk
	var vols []virtv1.Volume
	for _, v := range vmboot.Volumes(job.Spec) {
		if v.Standalone == "" {
			continue
		}
		n := standaloneDiskPrefix + strconv.Itoa(v.Index)
		disks = append(disks, virtv1.Disk{
			Name:       n,
			DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio, ReadOnly: v.ReadOnly}},
			Serial:     v.Disk,
		})
		vols = append(vols, virtv1.Volume{Name: n, VolumeSource: virtv1.VolumeSource{
			DataVolume: &virtv1.DataVolumeSource{Name: StandaloneVolumeName(job.Team, v.Standalone)},
		}})
	}
	return disks, vols
}

// ensureStandaloneVolumes creates each of dvs that the cluster does not
// have. One that exists is left as it is (CDI refuses changes to a
// DataVolume's spec, and the rack's storage class may have changed since
// it was made); one being deleted is an error the ork retries
// (unavailable), as is a DataVolume of that name that is another
// volume's or no volume's (internal: a hash collision, or an object
// someone else made).
func ensureStandaloneVolumes(ctx context.Context, c client.Client, dvs []*cdiv1.DataVolume) error {
	for _, dv := range dvs {
		var got cdiv1.DataVolume
		err := withRetry(func() error { return c.Get(ctx, client.ObjectKeyFromObject(dv), &got) })
		switch {
		case apierrors.IsNotFound(err):
			err = withRetry(func() error { return c.Create(ctx, dv.DeepCopy()) })
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create DataVolume %s of standalone volume %s: %w", dv.Name, dv.Annotations[AnnotationVolume], err)
			}
		case err != nil:
			return fmt.Errorf("get DataVolume %s of standalone volume %s: %w", dv.Name, dv.Annotations[AnnotationVolume], err)
		case got.DeletionTimestamp != nil:
			return fabric.Errorf(fabric.CodeUnavailable, "standalone volume %s of team %s (DataVolume %s) is being deleted: try again once it is gone",
				dv.Annotations[AnnotationVolume], dv.Annotations[AnnotationTeam], dv.Name)
		case got.Labels[LabelStandaloneVolume] != "true" || got.Annotations[AnnotationTeam] != dv.Annotations[AnnotationTeam] ||
			got.Annotations[AnnotationVolume] != dv.Annotations[AnnotationVolume]:
			return fabric.Errorf(fabric.CodeInternal, "DataVolume %s in namespace %s is not standalone volume %s of team %s: rename or remove it",
				dv.Name, dv.Namespace, dv.Annotations[AnnotationVolume], dv.Annotations[AnnotationTeam])
		}
	}
	return nil
}

// StoredVolumes are the standalone volumes the DataVolumes dvs keep (those
// labelled LabelStandaloneVolume with their team and name annotated; the
// rest are left out), sorted by team and name. Size is what the DataVolume
// asked for; Bytes is 0, as Kubernetes reports no volume's use through
// its API (a PVC's status gives its capacity, not what is written). Job is
// the job of a VMI in vmis that has the volume attached, whatever its
// phase, being deleted included: its VM may still be powering off, and the
// disk is free only once the VMI is gone.
func StoredVolumes(dvs []cdiv1.DataVolume, vmis []virtv1.VirtualMachineInstance) []cosmic.StoredVolume {
	held := map[string]string{} // DataVolume name → job
	for i := range vmis {
		v := &vmis[i]
		job := v.Labels[LabelJob]
		if job == "" {
			continue
		}
		for _, vol := range v.Spec.Volumes {
			var claim string
			switch {
			case vol.DataVolume != nil:
				claim = vol.DataVolume.Name
			case vol.PersistentVolumeClaim != nil:
				claim = vol.PersistentVolumeClaim.ClaimName
			}
			if claim != "" && (held[claim] == "" || job < held[claim]) {
				held[claim] = job // the least job ID: one answer, whatever the order
			}
		}
	}
	var out []cosmic.StoredVolume
	for i := range dvs {
		dv := &dvs[i]
		team, name := dv.Annotations[AnnotationTeam], dv.Annotations[AnnotationVolume]
		if dv.Labels[LabelStandaloneVolume] != "true" || team == "" || name == "" {
			continue
		}
		sv := cosmic.StoredVolume{Team: team, Name: name, Job: held[dv.Name]}
		if st := dv.Spec.Storage; st != nil {
			if q, ok := st.Resources.Requests[corev1.ResourceStorage]; ok {
				sv.Size = q.Value()
			}
		}
		out = append(out, sv)
	}
	slices.SortFunc(out, func(a, b cosmic.StoredVolume) int {
		return cmp.Or(cmp.Compare(a.Team, b.Team), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// listStoredVolumes lists the standalone volumes of namespace ns that r
// (the worker's informers) shows, with the jobs that hold them.
func listStoredVolumes(ctx context.Context, r client.Reader, ns string) ([]cosmic.StoredVolume, error) {
	var dvs cdiv1.DataVolumeList
	if err := r.List(ctx, &dvs, client.InNamespace(ns), client.MatchingLabels{LabelStandaloneVolume: "true"}); err != nil {
		return nil, err
	}
	if len(dvs.Items) == 0 {
		return nil, nil
	}
	var vmis virtv1.VirtualMachineInstanceList
	if err := r.List(ctx, &vmis, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	return StoredVolumes(dvs.Items, vmis.Items), nil
}

// holdsStandalone says whether a VMI attaches a standalone volume: its
// coming and going changes which job holds the volume.
func holdsStandalone(v *virtv1.VirtualMachineInstance) bool {
	return slices.ContainsFunc(v.Spec.Volumes, func(vol virtv1.Volume) bool {
		return strings.HasPrefix(vol.Name, standaloneDiskPrefix)
	})
}

// volumes lists the rack's standalone volumes from the informers.
func (w *Worker) volumes(ctx context.Context) ([]cosmic.StoredVolume, error) {
	return listStoredVolumes(ctx, w.cache, w.cfg.Namespace)
}

// volumesChanged pushes the capacity if the rack's standalone volumes, or
// the jobs that hold them, changed. volMu keeps the list it compares with
// the latest one computed.
func (w *Worker) volumesChanged(ctx context.Context) {
	w.volMu.Lock()
	defer w.volMu.Unlock()
	vols, err := w.volumes(ctx)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if slices.Equal(vols, w.lastVols) {
		return
	}
	w.lastVols = vols
	w.markCapacityLocked()
}

// standaloneEvent calls volumesChanged for an event about a standalone
// volume's DataVolume or a VMI that attaches one.
func (w *Worker) standaloneEvent(ctx context.Context, obj any) {
	o, ok := objectOf(obj)
	if !ok {
		return
	}
	switch o := o.(type) {
	case *cdiv1.DataVolume:
		if o.Labels[LabelStandaloneVolume] != "true" {
			return
		}
	case *virtv1.VirtualMachineInstance:
		if !holdsStandalone(o) {
			return
		}
	default:
		return
	}
	w.volumesChanged(ctx)
}

// DeleteVolume implements worker.Worker: it deletes the volume's
// DataVolume (and with it its PVC), unless a VMI of the rack attaches it.
// The list is read from the API server, not the informers: a VMI made a
// moment ago must not lose its disk.
func (w *Worker) DeleteVolume(ctx context.Context, p worker.VolumeRef) error {
	if err := w.available(ctx); err != nil {
		return err
	}
	vols, err := listStoredVolumes(ctx, w.c, w.cfg.Namespace)
	if err != nil {
		return fabric.Errorf(fabric.CodeUnavailable, "rack %s: list standalone volumes: %v", w.cfg.Rack, err)
	}
	i := slices.IndexFunc(vols, func(v cosmic.StoredVolume) bool { return v.Team == p.Team && v.Name == p.Name })
	if i < 0 {
		return fmt.Errorf("%w: this rack keeps no volume %s of team %s", cosmic.ErrNotFound, p.Name, p.Team)
	}
	if job := vols[i].Job; job != "" {
		return fmt.Errorf("%w: volume %s is mounted by job %s: it is removed once that job has stopped", cosmic.ErrConflict, p.Name, job)
	}
	dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: w.cfg.Namespace, Name: StandaloneVolumeName(p.Team, p.Name)}}
	if err := w.c.Delete(ctx, dv); err != nil && !apierrors.IsNotFound(err) {
		return fabric.Errorf(fabric.CodeUnavailable, "rack %s: delete DataVolume %s: %v", w.cfg.Rack, dv.Name, err)
	}
	w.volumesChanged(ctx)
	return nil
}
