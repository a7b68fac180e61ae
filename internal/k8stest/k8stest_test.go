package k8stest

import (
	"context"
	"os"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	gpuResource = corev1.ResourceName("nvidia.com/GH100_H100_SXM5_80GB")
	ns          = "cosmicac-smoke"
	jobLabel    = "cosmicac.io/job"
)

// applyTyped server-side applies a typed object: it becomes unstructured
// without status and creationTimestamp, so that the applier owns neither.
func applyTyped(ctx context.Context, c client.Client, obj client.Object) error {
	m, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: m}
	delete(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner("cosmicac-test"), client.ForceOwnership)
}

func testVMI(name, job string) *kubevirtv1.VirtualMachineInstance {
	return &kubevirtv1.VirtualMachineInstance{
		TypeMeta: metav1.TypeMeta{APIVersion: kubevirtv1.SchemeGroupVersion.String(), Kind: "VirtualMachineInstance"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{jobLabel: job, "cosmicac.io/replica": "0"}},
		Spec: kubevirtv1.VirtualMachineInstanceSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: "gpu-node-1"},
			Domain: kubevirtv1.DomainSpec{
				CPU: &kubevirtv1.CPU{Cores: 16},
				Resources: kubevirtv1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceMemory: resource.MustParse("64Gi")}},
				Devices: kubevirtv1.Devices{
					GPUs: []kubevirtv1.GPU{{Name: "gpu0", DeviceName: string(gpuResource)}, {Name: "gpu1", DeviceName: string(gpuResource)}},
					Disks: []kubevirtv1.Disk{{Name: "root", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}},
						{Name: "cloudinit", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}}},
					Interfaces: []kubevirtv1.Interface{
						{Name: "default", InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Masquerade: &kubevirtv1.InterfaceMasquerade{}}},
						{Name: "ib", InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{SRIOV: &kubevirtv1.InterfaceSRIOV{}}}},
				},
			},
			Networks: []kubevirtv1.Network{
				{Name: "default", NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{}}},
				{Name: "ib", NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: ns + "/ib"}}}},
			Volumes: []kubevirtv1.Volume{
				{Name: "root", VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "job-1-root"}}},
				{Name: "cloudinit", VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{
					UserDataSecretRef: &corev1.LocalObjectReference{Name: "job-1-cloudinit"}}}}},
		},
	}
}

func TestSmoke(t *testing.T) {
	env := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := env.Client

	// The kubeconfig file works (the worker takes one).
	kcfg, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := client.New(kcfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}

	if err := kc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	// A GPU node; capacity goes through the status subresource.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-1",
		Labels: map[string]string{corev1.LabelHostname: "gpu-node-1"}}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	gpus := corev1.ResourceList{gpuResource: resource.MustParse("8"),
		corev1.ResourceCPU: resource.MustParse("192"), corev1.ResourceMemory: resource.MustParse("2Ti")}
	node.Status.Capacity, node.Status.Allocatable = gpus, gpus
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(), Reason: "KubeletReady"}}
	if err := c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	var gotNode corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: "gpu-node-1"}, &gotNode); err != nil {
		t.Fatal(err)
	}
	if q := gotNode.Status.Allocatable[gpuResource]; q.Value() != 8 {
		t.Fatalf("node allocatable %s = %v, want 8", gpuResource, q.String())
	}

	// Multus network for the VMI's second interface.
	nad := &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Name: "ib", Namespace: ns},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: `{"cniVersion":"0.3.1","type":"ib-sriov"}`}}
	if err := c.Create(ctx, nad); err != nil {
		t.Fatal(err)
	}

	// A CDI DataVolume importing the root disk; status through the subresource.
	url := "docker://registry.example:5000/cosmicac/ubuntu-cuda:24.04"
	dv := &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "job-1-root", Namespace: ns, Labels: map[string]string{jobLabel: "job-1"}},
		Spec: cdiv1.DataVolumeSpec{
			Source: &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: &url}},
			Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse("200Gi")}}},
		},
	}
	if err := c.Create(ctx, dv); err != nil {
		t.Fatal(err)
	}
	dv.Status = cdiv1.DataVolumeStatus{Phase: cdiv1.ImportInProgress, Progress: "45.00%"}
	if err := c.Status().Update(ctx, dv); err != nil {
		t.Fatal(err)
	}

	// The real VMI schema is enforced: a VMI without spec.domain is refused.
	bad := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": "bad", "namespace": ns},
		"spec":     map[string]any{"nodeSelector": map[string]any{"a": "b"}}}}
	if err := c.Create(ctx, bad); !apierrors.IsInvalid(err) {
		t.Fatalf("VMI without spec.domain: err = %v, want Invalid", err)
	}

	// Server-side apply the VMI (twice: the second is a no-op).
	for i := 0; i < 2; i++ {
		if err := applyTyped(ctx, c, testVMI("job-1-r0", "job-1")); err != nil {
			t.Fatalf("apply VMI: %v", err)
		}
	}
	// Play virt-controller: a plain update of status (no status subresource).
	var vmi kubevirtv1.VirtualMachineInstance
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "job-1-r0"}, &vmi); err != nil {
		t.Fatal(err)
	}
	if len(vmi.Spec.Domain.Devices.GPUs) != 2 {
		t.Fatalf("VMI GPUs = %+v", vmi.Spec.Domain.Devices.GPUs)
	}
	vmi.Status.Phase = kubevirtv1.Running
	vmi.Status.NodeName = "gpu-node-1"
	vmi.Status.Conditions = []kubevirtv1.VirtualMachineInstanceCondition{{
		Type: kubevirtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue}}
	if err := c.Update(ctx, &vmi); err != nil {
		t.Fatal(err)
	}
	// Applying again (forced) keeps the status another manager wrote.
	if err := applyTyped(ctx, c, testVMI("job-1-r0", "job-1")); err != nil {
		t.Fatal(err)
	}
	if err := applyTyped(ctx, c, testVMI("job-2-r0", "job-2")); err != nil {
		t.Fatal(err)
	}
	checkVMI := func(cl client.Client) {
		t.Helper()
		var got kubevirtv1.VirtualMachineInstance
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "job-1-r0"}, &got); err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != kubevirtv1.Running || got.Status.NodeName != "gpu-node-1" || len(got.Status.Conditions) != 1 {
			t.Fatalf("VMI status = %+v, want Running on gpu-node-1 with Ready", got.Status)
		}
	}
	checkVMI(c)

	// List by label.
	var vmis kubevirtv1.VirtualMachineInstanceList
	if err := c.List(ctx, &vmis, client.InNamespace(ns), client.MatchingLabels{jobLabel: "job-1"}); err != nil {
		t.Fatal(err)
	}
	if len(vmis.Items) != 1 || vmis.Items[0].Name != "job-1-r0" {
		t.Fatalf("VMIs labelled job-1: %d", len(vmis.Items))
	}

	// Stop the apiserver (etcd keeps the data) and start it again.
	t0 := time.Now()
	if err := env.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("apiserver stopped in %v", time.Since(t0).Round(time.Millisecond))
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "job-1-r0"}, &kubevirtv1.VirtualMachineInstance{}); err == nil {
		t.Fatal("Get succeeded with the apiserver stopped")
	} else {
		t.Logf("with the apiserver stopped: %v", err)
	}
	t0 = time.Now()
	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("apiserver started again (serving the CRDs) in %v", time.Since(t0).Round(time.Millisecond))
	checkVMI(c)
	checkVMI(kc) // the kubeconfig stays valid: same port and certificates
	var gotDV cdiv1.DataVolume
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "job-1-root"}, &gotDV); err != nil {
		t.Fatal(err)
	}
	if gotDV.Status.Phase != cdiv1.ImportInProgress || gotDV.Status.Progress != "45.00%" {
		t.Fatalf("DataVolume status = %+v", gotDV.Status)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "gpu-node-1"}, &gotNode); err != nil {
		t.Fatal(err)
	}

	// Delete with a propagation policy. Background: gone at once (no garbage
	// collector runs, so dependents would stay).
	bg := metav1.DeletePropagationBackground
	if err := c.Delete(ctx, testVMI("job-1-r0", "job-1"), client.PropagationPolicy(bg)); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "job-1-r0"}, &vmi); !apierrors.IsNotFound(err) {
		t.Fatalf("after delete: %v, want NotFound", err)
	}
	// Foreground: with no garbage collector the object stays, marked with
	// deletionTimestamp and the foregroundDeletion finalizer; the test plays
	// the collector by removing the finalizer.
	fg := metav1.DeletePropagationForeground
	if err := c.Delete(ctx, testVMI("job-2-r0", "job-2"), client.PropagationPolicy(fg)); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "job-2-r0"}, &vmi); err != nil {
		t.Fatal(err)
	}
	if vmi.DeletionTimestamp == nil || len(vmi.Finalizers) != 1 || vmi.Finalizers[0] != metav1.FinalizerDeleteDependents {
		t.Fatalf("after foreground delete: deletionTimestamp %v finalizers %v", vmi.DeletionTimestamp, vmi.Finalizers)
	}
	vmi.Finalizers = nil
	if err := c.Update(ctx, &vmi); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "job-2-r0"}, &vmi); !apierrors.IsNotFound(err) {
		t.Fatalf("after removing the finalizer: %v, want NotFound", err)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	StopShared()
	os.Exit(code)
}

func TestShared(t *testing.T) {
	env := Shared(t)
	if again := Shared(t); again != env {
		t.Fatal("Shared started a second control plane")
	}
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := env.Client.List(context.Background(), &crds); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"virtualmachineinstances.kubevirt.io": true, "virtualmachines.kubevirt.io": true,
		"datavolumes.cdi.kubevirt.io": true, "network-attachment-definitions.k8s.cni.cncf.io": true}
	for _, crd := range crds.Items {
		delete(want, crd.Name)
	}
	if len(want) != 0 {
		t.Fatalf("CRDs not installed: %v", want)
	}
}
