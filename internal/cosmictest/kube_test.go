package cosmictest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/k8stest"
	"github.com/cosmicac/cosmicac/internal/k8sworker"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// TestUpWithKubeconfig runs the whole platform against a real kube-apiserver
// (with the KubeVirt and CDI CRDs), as `cosmicac up --kubeconfig` does: the
// cluster's nodes become the rack's capacity, a job's objects are created on
// the apiserver, and the job runs once the test, playing CDI and KubeVirt,
// finishes the import and boots the VMI.
func TestUpWithKubeconfig(t *testing.T) {
	kube := k8stest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := kube.Client
	rc := k8sworker.DefaultRackConfig()
	rc.Rack, rc.Location = "kube-eu-1", "eu"
	// No namespace on the cluster: the worker creates it (its account may).
	for i := range 2 {
		addGPUNode(t, ctx, c, fmt.Sprintf("gpu-%d", i), corev1.ResourceName("nvidia.com/"+rc.GPUModel), 8)
	}
	e := NewEnv(t, func(cfg *platform.Config) { cfg.Kube = &platform.KubeConfig{Kubeconfig: kube.Kubeconfig, Rack: rc} })

	// The cluster's GPUs are the rack's.
	waittest.NoError(t, func() error {
		racks, err := e.Client.ListRacks(e.Ctx)
		if err != nil || len(racks) != 1 || racks[0].ID != rc.Rack || racks[0].GPUs != 16 || racks[0].FreeGPUs != 16 {
			return fmt.Errorf("racks %+v (%v), want %s with 16 free GPUs", racks, err, rc.Rack)
		}
		return nil
	}, "the cluster's rack")

	waittest.NoError(t, func() error {
		var ns corev1.Namespace
		return c.Get(ctx, client.ObjectKey{Name: rc.Namespace}, &ns)
	}, "the worker creates its namespace")

	spec := Container("on-kube", 2)
	spec.Location = "eu"
	j := e.Create(spec)
	j = e.WaitState(j.ID, cosmic.StatePending, cosmic.StateStarting)
	name := k8sworker.VMIName(j.ID, 0, 0)
	playVMI(t, ctx, c, rc.Namespace, name, 2, j.Status.Replicas[0].Nodes[0])
	// The VMI is Ready but its agent has not reported: once the ork has the
	// worker's report of the Ready VMI (the job's progress is the wait for
	// its agent), the job is still starting.
	waittest.NoError(t, func() error {
		got, err := e.Client.GetJob(e.Ctx, j.ID)
		if err != nil {
			return err
		}
		if got.Status.State != cosmic.StateStarting || got.Status.Progress == nil || got.Status.Progress.Step != k8sworker.StepAgent {
			return fmt.Errorf("status %s %+v, want starting at step %q", got.Status.State, got.Status.Progress, k8sworker.StepAgent)
		}
		return nil
	}, "the job waits for its agent")
	// Play the VM: run the agent from the Secret's agent.yaml. It dials the
	// worker, the agents' directory and the app-node; the job runs, and a
	// shell reaches it through the app-node (which accepts only the key the
	// job's status lists).
	path, _ := agentFileOf(t, ctx, c, rc.Namespace, j.ID)
	acfg, err := agent.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	acfg.WorkDir = t.TempDir()
	actx, acancel := context.WithCancel(ctx)
	adone := make(chan error, 1)
	go func() { adone <- agent.New(acfg, nil).Run(actx) }()
	defer func() { acancel(); <-adone }()
	j = e.WaitState(j.ID, cosmic.StateRunning)
	if keys := j.Status.Replicas[0].AgentKeys; len(keys) != 1 || keys[0] != acfg.Identity.PublicKey().String() {
		t.Fatalf("agent keys in the job's status %v, want the agent's %s", keys, acfg.Identity.PublicKey())
	}
	tok, err := e.P.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	var code int
	var out string
	waittest.NoError(t, func() error {
		code, out, _, err = e.shell(tok, j.ID, "", "echo", "hi from the VM")
		return err
	}, "a shell in the job")
	if code != 0 || out != "hi from the VM\n" {
		t.Fatalf("shell: code %d, out %q", code, out)
	}

	// Deleting the job removes its objects from the cluster.
	if _, err := e.Client.DeleteJob(e.Ctx, j.ID, true); err != nil {
		t.Fatal(err)
	}
	waittest.NoError(t, func() error {
		var v virtv1.VirtualMachineInstance
		err := c.Get(ctx, client.ObjectKey{Namespace: rc.Namespace, Name: name}, &v)
		if err == nil {
			return fmt.Errorf("VMI %s still exists", name)
		}
		return client.IgnoreNotFound(err)
	}, "the job's VMI deleted")
}

// TestUpWithKubeconfigNoNamespace: `up --kubeconfig` on a cluster without
// the rack's namespace, with an account that may not create it. The user
// sees why where they look: the job is pending with reason
// rack_misconfigured naming the namespace, and `racks list` shows the rack
// unhealthy with the fix; once an operator creates the namespace, the job
// goes on.
func TestUpWithKubeconfigNoNamespace(t *testing.T) {
	kube := k8stest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := kube.Client
	rc := k8sworker.DefaultRackConfig()
	rc.Rack, rc.Location = "kube-eu-1", "eu"
	addGPUNode(t, ctx, c, "gpu-0", corev1.ResourceName("nvidia.com/"+rc.GPUModel), 8)
	kubeconfig := restrictedKubeconfig(t, ctx, kube, "cosmicac-worker")
	e := NewEnv(t, func(cfg *platform.Config) { cfg.Kube = &platform.KubeConfig{Kubeconfig: kubeconfig, Rack: rc} })

	spec := Container("on-kube", 1)
	spec.Location = "eu"
	j := e.Create(spec)
	waittest.NoError(t, func() error {
		got, err := e.Client.GetJob(e.Ctx, j.ID)
		if err != nil {
			return err
		}
		if r := got.Status.Reason; got.Status.State != cosmic.StatePending || r == nil || r.Code != cosmic.ReasonRackMisconfigured ||
			!strings.Contains(r.Message, `namespace "`+rc.Namespace+`"`) {
			return fmt.Errorf("status %s %+v, want pending with %s naming the namespace", got.Status.State, r, cosmic.ReasonRackMisconfigured)
		}
		return nil
	}, "the job pending with the rack's problem")
	waittest.NoError(t, func() error {
		racks, err := e.Client.ListRacks(e.Ctx)
		if err != nil || len(racks) != 1 || racks[0].Problem == nil || racks[0].Problem.Code != cosmic.ReasonRackMisconfigured ||
			!strings.Contains(racks[0].Problem.Fix, "kubectl create namespace "+rc.Namespace) {
			return fmt.Errorf("racks %+v (%v), want the rack's problem with its fix", racks, err)
		}
		return nil
	}, "racks list shows the problem")

	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rc.Namespace}}); err != nil {
		t.Fatal(err)
	}
	waittest.NoError(t, func() error {
		got, err := e.Client.GetJob(e.Ctx, j.ID)
		if err != nil {
			return err
		}
		var dv cdiv1.DataVolume
		if err := c.Get(ctx, client.ObjectKey{Namespace: rc.Namespace, Name: k8sworker.VMIName(j.ID, 0, 0)}, &dv); err != nil {
			return err
		}
		if got.Status.Reason != nil {
			return fmt.Errorf("reason %+v after the namespace was created", got.Status.Reason)
		}
		racks, err := e.Client.ListRacks(e.Ctx)
		if err != nil || len(racks) != 1 || racks[0].Problem != nil {
			return fmt.Errorf("racks %+v (%v), want no problem", racks, err)
		}
		return nil
	}, "the job applied once the namespace exists")
}

// restrictedKubeconfig is kube's kubeconfig acting as user (impersonated),
// whose ClusterRole grants all the worker uses but namespaces.
func restrictedKubeconfig(t *testing.T, ctx context.Context, kube *k8stest.Env, user string) string {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"", "kubevirt.io", "cdi.kubevirt.io", "k8s.cni.cncf.io"},
		Resources: []string{"nodes", "configmaps", "secrets", "services", "persistentvolumeclaims", "pods", "events",
			"virtualmachineinstances", "datavolumes", "network-attachment-definitions"},
		Verbs: []string{"*"},
	}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	for _, o := range []client.Object{role, binding} {
		if err := kube.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := clientcmd.LoadFromFile(kube.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func addGPUNode(t *testing.T, ctx context.Context, c client.Client, name string, res corev1.ResourceName, gpus int) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	n.Status.Capacity = corev1.ResourceList{res: *resource.NewQuantity(int64(gpus), resource.DecimalSI), corev1.ResourceCPU: resource.MustParse("128")}
	n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if err := c.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	n.Spec.Taints = nil // play the node lifecycle controller
	if err := c.Update(ctx, n); err != nil {
		t.Fatal(err)
	}
}

// playVMI plays CDI and KubeVirt for the VMI name: its root disk imports,
// then it is scheduled on node and boots Ready, claiming gpus GPUs.
func playVMI(t *testing.T, ctx context.Context, c client.Client, ns, name string, gpus int, node string) {
	t.Helper()
	waittest.NoError(t, func() error {
		var dv cdiv1.DataVolume
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &dv); err != nil {
			return err
		}
		dv.Status.Phase, dv.Status.Progress = cdiv1.Succeeded, "100.0%"
		return c.Status().Update(ctx, &dv)
	}, "DataVolume %s imported", name)
	waittest.NoError(t, func() error {
		var v virtv1.VirtualMachineInstance
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &v); err != nil {
			return err
		}
		if len(v.Spec.Domain.Devices.GPUs) != gpus {
			return fmt.Errorf("VMI claims %d GPUs, want %d", len(v.Spec.Domain.Devices.GPUs), gpus)
		}
		v.Status.Phase = virtv1.Running
		v.Status.NodeName = node
		v.Status.Conditions = []virtv1.VirtualMachineInstanceCondition{{Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue}}
		return c.Update(ctx, &v)
	}, "VMI %s running", name)
}

// agentFileOf plays cloud-init for replica 0, VMI 0 of job: it writes the
// agent's config file from the VMI's Secret and returns its path, and the
// user data.
func agentFileOf(t *testing.T, ctx context.Context, c client.Client, ns, job string) (string, []byte) {
	t.Helper()
	var sec corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: k8sworker.SecretName(job, 0, 0)}, &sec); err != nil {
		t.Fatal(err)
	}
	ud := sec.Data[k8sworker.UserDataKey]
	file, err := k8sworker.AgentFile(ud)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, ud
}
