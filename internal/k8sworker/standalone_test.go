package k8sworker

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/vmboot"
	"github.com/cosmicac/cosmicac/internal/worker"
	"github.com/cosmicac/cosmicac/internal/worker/workertest"
)

// The DataVolume name of a standalone volume is a DNS-1123 label of at
// most 63 characters, the same for the same team and name, and another
// for any other pair, however alike they read.
func TestStandaloneVolumeName(t *testing.T) {
	long := strings.Repeat("v", 63)
	tests := []struct{ team, name, want string }{
		{"ml", "scratch", "cv-ml-scratch-"},
		{"ML Research", "Ref_Data.v2", "cv-ml-research-ref-data-v2-"},
		{"日本", "x", "cv-x-"},
		{"日本", "", "cv-"},
		{"--", "--", "cv-"},
		{"team", long, "cv-team-" + strings.Repeat("v", 63-len("cv-team-")-1-standaloneHashLen) + "-"},
	}
	seen := map[string]string{}
	for _, tc := range tests {
		got := StandaloneVolumeName(tc.team, tc.name)
		if !strings.HasPrefix(got, tc.want) || len(got) != len(tc.want)+standaloneHashLen {
			t.Errorf("StandaloneVolumeName(%q, %q) = %q, want %q and %d hex digits", tc.team, tc.name, got, tc.want, standaloneHashLen)
		}
		if msgs := validation.IsDNS1123Label(got); len(msgs) > 0 {
			t.Errorf("StandaloneVolumeName(%q, %q) = %q: %v", tc.team, tc.name, got, msgs)
		}
		if again := StandaloneVolumeName(tc.team, tc.name); again != got {
			t.Errorf("StandaloneVolumeName(%q, %q) = %q, then %q", tc.team, tc.name, got, again)
		}
		seen[got] = tc.team + "/" + tc.name
	}
	// Pairs whose readable parts are the same.
	for _, p := range [][2][2]string{
		{{"ML", "a"}, {"ml", "a"}},
		{{"a-b", "c"}, {"a", "b-c"}},
		{{"a/b", "c"}, {"a", "b/c"}},
		{{"team", long}, {"team", long[:62]}},
	} {
		a, b := StandaloneVolumeName(p[0][0], p[0][1]), StandaloneVolumeName(p[1][0], p[1][1])
		if a == b {
			t.Errorf("%v and %v share the name %s", p[0], p[1], a)
		}
	}
}

// The golden case's standalone volumes: blank DataVolumes of the team,
// owned by no job and labelled for no job (Delete's selectors and the
// garbage collector never reach them), and a virtio disk each on the VMI
// with the serial and the read-only flag the agent's bootstrap gives.
func TestBuildReplicaStandalone(t *testing.T) {
	tc := buildCases()["container-standalone"]
	g, err := BuildReplica(tc.cfg, tc.job, tc.res, tc.boot)
	if err != nil {
		t.Fatal(err)
	}
	root := g.Root.DeepCopy()
	root.UID = testRootID
	g.SetOwner(root)
	if len(g.Standalone) != 2 {
		t.Fatalf("%d standalone DataVolumes, want 2", len(g.Standalone))
	}
	for _, o := range g.Objects() {
		if _, ok := o.(*cdiv1.DataVolume); ok && o.GetLabels()[LabelStandaloneVolume] != "" {
			t.Errorf("Objects lists standalone volume %s: it would be owned by the job", o.GetName())
		}
	}
	want := []string{"scratch", "Ref_Data.v2"}
	for i, dv := range g.Standalone {
		if dv.Name != StandaloneVolumeName(tc.job.Team, want[i]) || dv.Namespace != tc.cfg.Namespace {
			t.Errorf("DataVolume %d: %s/%s", i, dv.Namespace, dv.Name)
		}
		if len(dv.OwnerReferences) > 0 || dv.Labels[LabelJob] != "" || dv.Labels[LabelReplica] != "" {
			t.Errorf("%s: owners %v, labels %v: it must outlive the job", dv.Name, dv.OwnerReferences, dv.Labels)
		}
		if dv.Labels[LabelStandaloneVolume] != "true" || dv.Labels[LabelManagedBy] != ManagedBy ||
			dv.Annotations[AnnotationTeam] != tc.job.Team || dv.Annotations[AnnotationVolume] != want[i] {
			t.Errorf("%s: labels %v, annotations %v", dv.Name, dv.Labels, dv.Annotations)
		}
		for k, v := range dv.Labels {
			if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
				t.Errorf("%s: label %s=%q: %v", dv.Name, k, v, msgs)
			}
		}
		if dv.Spec.Source == nil || dv.Spec.Source.Blank == nil || dv.Spec.Source.Registry != nil {
			t.Errorf("%s: source %+v, want blank", dv.Name, dv.Spec.Source)
		}
		size := dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage]
		if size.Value() != int64(vmboot.StandaloneVolumeGiB)<<30 || dv.Spec.Storage.StorageClassName == nil || *dv.Spec.Storage.StorageClassName != tc.cfg.StorageClassName {
			t.Errorf("%s: storage %+v", dv.Name, dv.Spec.Storage)
		}
	}

	vmi := g.VMIs[0]
	type disk struct {
		Name, Serial, DataVolume string
		Bus                      virtv1.DiskBus
		ReadOnly                 bool
	}
	var got []disk
	claims := map[string]string{}
	for _, v := range vmi.Spec.Volumes {
		if v.DataVolume != nil {
			claims[v.Name] = v.DataVolume.Name
		}
	}
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		if d.Serial == "" {
			continue
		}
		if d.Disk == nil {
			t.Fatalf("disk %s with a serial is not a disk: %+v", d.Name, d.DiskDevice)
		}
		got = append(got, disk{Name: d.Name, Serial: d.Serial, DataVolume: claims[d.Name], Bus: d.Disk.Bus, ReadOnly: d.Disk.ReadOnly})
	}
	wantDisks := []disk{
		{Name: "standalone-1", Serial: vmboot.StandaloneSerial(1), DataVolume: g.Standalone[0].Name, Bus: virtv1.DiskBusVirtio},
		{Name: "standalone-2", Serial: vmboot.StandaloneSerial(2), DataVolume: g.Standalone[1].Name, Bus: virtv1.DiskBusVirtio, ReadOnly: true},
	}
	if diff := cmp.Diff(wantDisks, got); diff != "" {
		t.Errorf("standalone disks (-want +got):\n%s", diff)
	}
	// The agent looks for the disks the bootstrap names: the same serials.
	for _, v := range vmboot.Volumes(tc.job.Spec) {
		if v.Standalone != "" && !strings.Contains(string(g.Secrets[0].Data[UserDataKey]), v.Disk) {
			t.Errorf("user data does not name disk %s", v.Disk)
		}
	}
	if !holdsStandalone(vmi) {
		t.Error("holdsStandalone: false for a VMI that attaches two")
	}
	for name, other := range buildCases() {
		if name == "container-standalone" {
			continue
		}
		og, err := BuildReplica(other.cfg, other.job, other.res, other.boot)
		if err != nil {
			t.Fatal(err)
		}
		if len(og.Standalone) > 0 || holdsStandalone(og.VMIs[0]) {
			t.Errorf("%s: standalone volumes %d, VMI holds one %v", name, len(og.Standalone), holdsStandalone(og.VMIs[0]))
		}
	}
}

// A standalone volume on a managed-inference job (validation refuses it
// too) is the spec's fault: rack_refused, not a malformed reservation.
func TestBuildReplicaRefusesStandaloneOnInference(t *testing.T) {
	def := DefaultRackConfig()
	job := testJob("ml", cosmic.Spec{Type: cosmic.TypeManagedInference, Location: "us",
		Inference: &cosmic.InferenceSpec{Model: "m", GPUsPerReplica: 1},
		Volumes:   []cosmic.Volume{{MountPath: "/v", Source: cosmic.VolumeSource{Standalone: &cosmic.StandaloneSource{Name: "v"}}}}})
	_, err := BuildReplica(def, job, cosmic.Reservation{Nodes: []cosmic.NodeAlloc{{Node: "a", GPUs: []int{0}}}}, Bootstrap{})
	var fields []string
	for _, fe := range cosmic.FieldErrors(err) {
		fields = append(fields, fe.Field)
	}
	if diff := cmp.Diff([]string{"spec.volumes[0].volumeSource.standalone"}, fields); diff != "" || !specRefused(err) {
		t.Errorf("fields (-want +got):\n%s\n%v", diff, err)
	}
}

// standaloneDV is a standalone volume's DataVolume as the cluster has it.
func standaloneDV(cfg RackConfig, team, name string) cdiv1.DataVolume {
	dv := BuildStandaloneVolume(cfg, team, name)
	dv.ResourceVersion = ""
	return *dv
}

// vmiWith is a VMI of job (no job label if job is "") attaching the
// DataVolumes claims, in namespace ns.
func vmiWith(ns, name, job string, claims ...string) virtv1.VirtualMachineInstance {
	v := virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{LabelManagedBy: ManagedBy}}}
	if job != "" {
		v.Labels[LabelJob] = job
	}
	v.Spec.Volumes = append(v.Spec.Volumes, virtv1.Volume{Name: rootDisk, VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: name}}})
	for i, c := range claims {
		v.Spec.Volumes = append(v.Spec.Volumes, virtv1.Volume{Name: standaloneDiskPrefix + strconv.Itoa(i), VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: c}}})
	}
	return v
}

// Capacity's volumes: one per standalone DataVolume (not the root disks),
// sorted, 100 GiB each, with the job of the VMI that attaches it, whatever
// that VMI's phase (a VM powering off, or being deleted, still has it).
func TestStoredVolumes(t *testing.T) {
	cfg := DefaultRackConfig()
	scratch := standaloneDV(cfg, "ml", "scratch")
	ref := standaloneDV(cfg, "ML Research", "ref")
	idle := standaloneDV(cfg, "ml", "idle")
	unnamed := standaloneDV(cfg, "ml", "lost")
	delete(unnamed.Annotations, AnnotationVolume)
	root := cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: VMIName(testJobID, 0, 0), Labels: map[string]string{LabelJob: testJobID}}}

	stopping := vmiWith(cfg.Namespace, "cj-b-r0-0", "job-b", ref.Name)
	stopping.Status.Phase = virtv1.Succeeded
	deleting := vmiWith(cfg.Namespace, "cj-c-r0-0", "job-c", scratch.Name)
	deleting.DeletionTimestamp = &metav1.Time{}
	vmis := []virtv1.VirtualMachineInstance{
		stopping,
		deleting,
		vmiWith(cfg.Namespace, "not-ours", "", idle.Name),
	}
	size := int64(vmboot.StandaloneVolumeGiB) << 30
	want := []cosmic.StoredVolume{
		{Team: "ML Research", Name: "ref", Size: size, Job: "job-b"},
		{Team: "ml", Name: "idle", Size: size},
		{Team: "ml", Name: "scratch", Size: size, Job: "job-c"},
	}
	got := StoredVolumes([]cdiv1.DataVolume{scratch, root, ref, unnamed, idle}, vmis)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("StoredVolumes (-want +got):\n%s", diff)
	}
	if got := StoredVolumes(nil, vmis); got != nil {
		t.Errorf("StoredVolumes of no DataVolume = %v", got)
	}

	// Through a client, as Capacity reads the informers: the rack's
	// namespace only.
	other := standaloneDV(cfg, "ml", "elsewhere")
	other.Namespace = "other"
	c := fake.NewClientBuilder().WithScheme(Scheme()).
		WithObjects(&scratch, &root, &ref, &idle, &other, &stopping).
		Build()
	ctx := context.Background()
	got, err := listStoredVolumes(ctx, c, cfg.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	want = []cosmic.StoredVolume{
		{Team: "ML Research", Name: "ref", Size: size, Job: "job-b"},
		{Team: "ml", Name: "idle", Size: size},
		{Team: "ml", Name: "scratch", Size: size},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("listStoredVolumes (-want +got):\n%s", diff)
	}
	if got, err := listStoredVolumes(ctx, fake.NewClientBuilder().WithScheme(Scheme()).Build(), cfg.Namespace); err != nil || got != nil {
		t.Errorf("listStoredVolumes of an empty namespace = %v, %v", got, err)
	}
}

// Apply creates a standalone volume only where it is missing: one that
// exists is left as it is (even with another storage class), one being
// deleted makes the ork try again later, and another object under its
// name is refused.
func TestEnsureStandaloneVolumes(t *testing.T) {
	cfg := DefaultRackConfig()
	cfg.StorageClassName = "new-class"
	ctx := context.Background()

	kept := standaloneDV(cfg, "ml", "kept")
	kept.Spec.Storage.StorageClassName = new("old-class")
	kept.Status.Phase = cdiv1.Succeeded
	c := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(&kept).Build()
	want := []*cdiv1.DataVolume{BuildStandaloneVolume(cfg, "ml", "kept"), BuildStandaloneVolume(cfg, "ml", "new")}
	for range 2 { // twice: idempotent
		if err := ensureStandaloneVolumes(ctx, c, want); err != nil {
			t.Fatal(err)
		}
	}
	var got cdiv1.DataVolume
	if err := c.Get(ctx, client.ObjectKeyFromObject(want[0]), &got); err != nil {
		t.Fatal(err)
	}
	if *got.Spec.Storage.StorageClassName != "old-class" {
		t.Errorf("existing volume changed: storage class %s", *got.Spec.Storage.StorageClassName)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(want[1]), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Source == nil || got.Spec.Source.Blank == nil || len(got.OwnerReferences) > 0 || got.Labels[LabelStandaloneVolume] != "true" {
		t.Errorf("created %+v", got)
	}

	deleting := standaloneDV(cfg, "ml", "going")
	deleting.DeletionTimestamp = new(metav1.Now()) // a zero time would be stored as none
	deleting.Finalizers = []string{"cdi.kubevirt.io/test"}
	foreign := cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: StandaloneVolumeName("ml", "taken")}}
	c = fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(&deleting, &foreign).Build()
	for name, code := range map[string]string{"going": fabric.CodeUnavailable, "taken": fabric.CodeInternal} {
		err := ensureStandaloneVolumes(ctx, c, []*cdiv1.DataVolume{BuildStandaloneVolume(cfg, "ml", name)})
		var fe *fabric.Error
		if !errors.As(err, &fe) || fe.Code != code {
			t.Errorf("%s: %v, want %s", name, err, code)
		}
	}
}

// The size a standalone volume's DataVolume asks is the size reported.
func TestStoredVolumeSize(t *testing.T) {
	cfg := DefaultRackConfig()
	dv := standaloneDV(cfg, "ml", "small")
	dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("5Gi")
	if got := StoredVolumes([]cdiv1.DataVolume{dv}, nil); len(got) != 1 || got[0].Size != 5<<30 || got[0].Bytes != 0 {
		t.Errorf("StoredVolumes = %+v", got)
	}
}

// readerCache is a worker's informer cache that reads r: a fake client
// stands in for the informers (only Get and List are called).
type readerCache struct {
	cache.Cache
	r client.Reader
}

func (c readerCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.r.Get(ctx, key, obj, opts...)
}

func (c readerCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.r.List(ctx, list, opts...)
}

// fakeWorker is a worker of rack cfg over c, its informers showing
// informed, synced and with the apiserver healthy: enough for the calls
// that read and write through the client (nothing runs).
func fakeWorker(cfg RackConfig, c client.Client, informed client.Reader) *Worker {
	synced := make(chan struct{})
	close(synced)
	w := &Worker{
		now:      time.Now,
		cfg:      cfg,
		rep:      &workertest.Recorder{},
		logs:     joblog.Discard,
		log:      slog.New(slog.DiscardHandler),
		c:        c,
		cache:    readerCache{r: informed},
		health:   &health{ok: true, checked: time.Now(), fresh: time.Hour},
		synced:   synced,
		replicas: map[replicaKey]*replicaMem{},
		gone:     map[replicaKey]time.Time{},
	}
	w.reports = worker.NewReportQueue(&w.mu)
	return w
}

// DeleteVolume deletes a standalone volume's DataVolume unless a VMI of the
// rack attaches it (a conflict naming the job, read from the apiserver
// even while the informers have not shown the VMI yet); a volume the rack
// does not keep (another team's, another namespace's, an object under its
// name that is no standalone volume, one already deleted) is not found.
func TestDeleteVolume(t *testing.T) {
	cfg := DefaultRackConfig()
	ctx := context.Background()
	size := int64(vmboot.StandaloneVolumeGiB) << 30

	scratch := standaloneDV(cfg, "ml", "scratch")
	idle := standaloneDV(cfg, "ml", "idle")
	elsewhere := standaloneDV(cfg, "ml", "elsewhere")
	elsewhere.Namespace = "other"
	foreign := cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: StandaloneVolumeName("ml", "foreign")}}
	holder := vmiWith(cfg.Namespace, "cj-a-r0-0", "job-a", scratch.Name)
	// A VMI of another namespace holds nothing of this rack's.
	otherVMI := vmiWith("other", "cj-b-r0-0", "job-b", idle.Name)
	c := fake.NewClientBuilder().WithScheme(Scheme()).
		WithObjects(&scratch, &idle, &elsewhere, &foreign, &holder, &otherVMI).
		Build()
	w := fakeWorker(cfg, c, c)
	w.volumesChanged(ctx)
	exists := func(dv *cdiv1.DataVolume) bool {
		t.Helper()
		err := c.Get(ctx, client.ObjectKeyFromObject(dv), &cdiv1.DataVolume{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}

	err := w.DeleteVolume(ctx, worker.VolumeRef{Team: "ml", Name: "scratch"})
	if !errors.Is(err, cosmic.ErrConflict) || !strings.Contains(err.Error(), "job-a") {
		t.Errorf("DeleteVolume of a volume a VMI attaches: %v, want a conflict naming job-a", err)
	}
	if !exists(&scratch) {
		t.Fatal("the attached volume's DataVolume was deleted")
	}
	// The informers have not shown the VMI yet: the apiserver's answer
	// holds.
	stale := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(&scratch, &idle).Build()
	if err := fakeWorker(cfg, c, stale).DeleteVolume(ctx, worker.VolumeRef{Team: "ml", Name: "scratch"}); !errors.Is(err, cosmic.ErrConflict) {
		t.Errorf("DeleteVolume with the informers behind: %v, want a conflict", err)
	}

	for _, ref := range []worker.VolumeRef{
		{Team: "other", Name: "scratch"}, // another team's name
		{Team: "ML", Name: "scratch"},
		{Team: "ml", Name: "elsewhere"}, // another namespace's
		{Team: "ml", Name: "foreign"},   // not a standalone volume
		{Team: "ml", Name: "never"},
	} {
		if err := w.DeleteVolume(ctx, ref); !errors.Is(err, cosmic.ErrNotFound) {
			t.Errorf("DeleteVolume(%+v) = %v, want not found", ref, err)
		}
	}
	if !exists(&elsewhere) || !exists(&foreign) || !exists(&scratch) || !exists(&idle) {
		t.Fatal("a refused DeleteVolume deleted a DataVolume")
	}

	// Held by no job of this rack: deleted, and the capacity changes.
	if err := w.DeleteVolume(ctx, worker.VolumeRef{Team: "ml", Name: "idle"}); err != nil {
		t.Fatalf("DeleteVolume of a free volume: %v", err)
	}
	if exists(&idle) {
		t.Error("DataVolume of the deleted volume still there")
	}
	want := []cosmic.StoredVolume{{Team: "ml", Name: "scratch", Size: size, Job: "job-a"}}
	w.mu.Lock()
	last := w.lastVols
	w.mu.Unlock()
	if diff := cmp.Diff(want, last); diff != "" {
		t.Errorf("volumes after DeleteVolume (-want +got):\n%s", diff)
	}
	if capa, err := w.Capacity(ctx); err != nil {
		t.Fatal(err)
	} else if diff := cmp.Diff(want, capa.Volumes); diff != "" {
		t.Errorf("Capacity volumes (-want +got):\n%s", diff)
	}

	// Once the VMI is gone, the volume it held goes; a second delete finds
	// nothing.
	if err := c.Delete(ctx, &holder); err != nil {
		t.Fatal(err)
	}
	if err := w.DeleteVolume(ctx, worker.VolumeRef{Team: "ml", Name: "scratch"}); err != nil {
		t.Fatalf("DeleteVolume once the VMI is gone: %v", err)
	}
	if exists(&scratch) {
		t.Error("DataVolume of the deleted volume still there")
	}
	if capa, err := w.Capacity(ctx); err != nil || len(capa.Volumes) != 0 {
		t.Errorf("Capacity volumes %+v, %v, want none", capa.Volumes, err)
	}
	if err := w.DeleteVolume(ctx, worker.VolumeRef{Team: "ml", Name: "scratch"}); !errors.Is(err, cosmic.ErrNotFound) {
		t.Errorf("second DeleteVolume: %v, want not found", err)
	}
}

// DeleteVolume while the worker cannot answer, or the apiserver fails it:
// unavailable (the ork tries again), never not found or a conflict; a
// DataVolume that went between the list and the delete is deleted.
func TestDeleteVolumeErrors(t *testing.T) {
	cfg := DefaultRackConfig()
	ctx := context.Background()
	dv := standaloneDV(cfg, "ml", "scratch")
	ref := worker.VolumeRef{Team: "ml", Name: "scratch"}
	build := func(f interceptor.Funcs) client.Client {
		return fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(&dv).WithInterceptorFuncs(f).Build()
	}

	unsynced := fakeWorker(cfg, build(interceptor.Funcs{}), build(interceptor.Funcs{}))
	unsynced.synced = make(chan struct{})
	if err := unsynced.DeleteVolume(ctx, ref); fabric.ErrorCode(err) != fabric.CodeUnavailable {
		t.Errorf("before the informers synced: %v, want unavailable", err)
	}

	gr := schema.GroupResource{Group: cdiv1.SchemeGroupVersion.Group, Resource: "datavolumes"}
	for name, tc := range map[string]struct {
		f    interceptor.Funcs
		code string // "" : no error
	}{
		"list fails": {f: interceptor.Funcs{List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return apierrors.NewServiceUnavailable("etcd away")
		}}, code: fabric.CodeUnavailable},
		"delete fails": {f: interceptor.Funcs{Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error {
			return apierrors.NewInternalError(errors.New("etcd away"))
		}}, code: fabric.CodeUnavailable},
		"gone meanwhile": {f: interceptor.Funcs{Delete: func(_ context.Context, _ client.WithWatch, o client.Object, _ ...client.DeleteOption) error {
			return apierrors.NewNotFound(gr, o.GetName())
		}}},
	} {
		c := build(tc.f)
		err := fakeWorker(cfg, c, build(interceptor.Funcs{})).DeleteVolume(ctx, ref)
		switch {
		case tc.code == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case tc.code != "" && (fabric.ErrorCode(err) != tc.code || errors.Is(err, cosmic.ErrNotFound) || errors.Is(err, cosmic.ErrConflict)):
			t.Errorf("%s: %v, want %s", name, err, tc.code)
		}
	}
}
