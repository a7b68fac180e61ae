package k8sworker

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/vmboot"
)

func TestDefaultRackConfigValid(t *testing.T) {
	c := DefaultRackConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("DefaultRackConfig().Validate() = %v", err)
	}
	if c.Client.QPS != 50 || c.Client.Burst != 100 {
		t.Errorf("client = %+v, want qps 50 burst 100", c.Client)
	}
}

func TestRackConfigValidate(t *testing.T) {
	tests := map[string]struct {
		edit   func(*RackConfig)
		fields []string
	}{
		"ok with mappings and networks": {edit: func(c *RackConfig) {
			c.GPUResources = []GPUResource{{Resource: "nvidia.com/GH100_H100_SXM5_80GB"}, {Resource: "nvidia.com/AD102GL_L40S", Model: "L40S", DeviceName: "nvidia.com/AD102GL"}}
			c.Networks = Networks{InfiniBand: []string{"ib-rail-0", "net/ib-rail-1"}, Overlay: "kube-system/ovs-overlay"}
			c.StorageClassName = "local-nvme"
		}},
		"every problem at once": {
			edit: func(c *RackConfig) {
				c.Rack = ""
				c.Location = "a b"
				c.Namespace = "Not_A_Namespace"
				c.StorageClassName = "UPPER"
				c.Client = ClientConfig{QPS: 0, Burst: 0}
				c.DriftPolicy = "ignore"
				c.PerGPU = PerGPU{}
				c.Images = Images{VLLM: "", Parakeet: "has space"}
				c.ImportRestartLimit = -1
				c.UnschedulableGrace = config.Duration(-time.Second)
				c.AgentPath = "cosmicac"
				c.Tolerations = []corev1.Toleration{{Key: "k", Operator: "Gt", Effect: "Sometimes"}}
			},
			fields: []string{"rack", "location", "namespace", "storageClassName", "images.vllm", "images.parakeet", "images.agentDisk",
				"perGPU.cpu", "perGPU.memoryGB", "client.qps", "client.burst", "driftPolicy", "importRestartLimit",
				"unschedulableGrace", "tolerations[0].operator", "tolerations[0].effect", "agentPath"},
		},
		"bad agent delivery and firmware": {
			edit: func(c *RackConfig) {
				c.AgentDelivery = "http"
				c.Firmware = Firmware{PCIHole64GiB: -1, HookSidecarImage: "Not An Image"}
			},
			fields: []string{"agentDelivery", "firmware.pciHole64GiB", "firmware.hookSidecarImage"},
		},
		"image delivery needs no agent disk": {edit: func(c *RackConfig) {
			c.AgentDelivery = vmboot.DeliveryImage
			c.Images.AgentDisk = ""
		}},
		"bad gpu mappings": {
			edit: func(c *RackConfig) {
				c.GPUResources = []GPUResource{{Resource: "GH100"}, {Resource: "nvidia.com/X", Model: "bad model"}, {Resource: "nvidia.com/X"}, {Resource: "amd.com/X"}}
				c.GPUModel = "X"
			},
			fields: []string{"gpuResources[0].resource", "gpuResources[1].model", "gpuResources[2].resource", "gpuResources[3].model"},
		},
		"rack model not mapped": {
			edit:   func(c *RackConfig) { c.GPUResources = []GPUResource{{Resource: "nvidia.com/L40S"}} },
			fields: []string{"gpuModel"},
		},
		"llama.cpp images": {edit: func(c *RackConfig) {
			c.Images.LlamaCPP, c.Images.EngineDisk = "docker://ghcr.io/cosmicac/vm-base:debian-12", "ghcr.io/cosmicac/cosmicac-engine-disk:v1"
		}},
		"llama.cpp image without its engine disk": {
			edit:   func(c *RackConfig) { c.Images.LlamaCPP = "docker://ghcr.io/cosmicac/vm-base:debian-12" },
			fields: []string{"images"},
		},
		"bad engine disk": {
			edit:   func(c *RackConfig) { c.Images.LlamaCPP, c.Images.EngineDisk = "docker://ghcr.io/x/y:1", "Not An Image" },
			fields: []string{"images.engineDisk"},
		},
		"half the networks": {
			edit:   func(c *RackConfig) { c.Networks = Networks{InfiniBand: []string{"ib/bad/name"}} },
			fields: []string{"networks.infiniband[0]", "networks"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := DefaultRackConfig()
			tc.edit(&c)
			var got []string
			for _, fe := range cosmic.FieldErrors(c.Validate()) {
				got = append(got, fe.Field)
			}
			if diff := cmp.Diff(tc.fields, got); diff != "" {
				t.Errorf("fields with problems (-want +got):\n%s\n%v", diff, c.Validate())
			}
		})
	}
}

func TestParseRackConfig(t *testing.T) {
	c, err := ParseRackConfig([]byte(`
rack: k8s-eu-1
location: eu
namespace: gpu-jobs
storageClassName: local-nvme
networks:
  infiniband: [ib-rail-0]
  overlay: overlay
unschedulableGrace: 30s
tolerations:
- key: nvidia.com/gpu
  operator: Exists
  effect: NoSchedule
`))
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultRackConfig()
	want.Rack, want.Location, want.Namespace, want.StorageClassName = "k8s-eu-1", "eu", "gpu-jobs", "local-nvme"
	want.Networks = Networks{InfiniBand: []string{"ib-rail-0"}, Overlay: "overlay"}
	want.UnschedulableGrace = config.Duration(30 * time.Second)
	want.Tolerations = c.Tolerations
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("ParseRackConfig (-want +got):\n%s", diff)
	}
	if len(c.Tolerations) != 1 || c.Tolerations[0].Key != "nvidia.com/gpu" {
		t.Errorf("tolerations = %+v", c.Tolerations)
	}
	if got := c.nadRef("overlay"); got != "gpu-jobs/overlay" {
		t.Errorf("nadRef = %q", got)
	}

	if _, err := ParseRackConfig([]byte("rack: r\nqps: 5\n")); err == nil || !strings.Contains(err.Error(), "qps") {
		t.Errorf("unknown field: err = %v", err)
	}
	if _, err := ParseRackConfig([]byte("driftPolicy: ignore\n")); err == nil || !strings.Contains(err.Error(), "driftPolicy") {
		t.Errorf("bad policy: err = %v", err)
	}
}

func TestGPUMapping(t *testing.T) {
	auto := DefaultRackConfig()
	for _, tc := range []struct {
		resource string
		model    string
		ok       bool
	}{
		{"nvidia.com/GH100_H100_SXM5_80GB", "GH100_H100_SXM5_80GB", true},
		{"nvidia.com/gpu", "", false},
		{"nvidia.com/mig-1g.10gb", "", false},
		{"amd.com/MI300X", "", false},
		{"cpu", "", false},
	} {
		g, ok := auto.gpuForResource(corev1.ResourceName(tc.resource))
		if ok != tc.ok || (ok && g.model() != tc.model) {
			t.Errorf("auto gpuForResource(%s) = %+v, %v; want model %q, %v", tc.resource, g, ok, tc.model, tc.ok)
		}
	}
	g, ok := auto.gpuForModel("GH100_H100_SXM5_80GB")
	if !ok || g.deviceName() != "nvidia.com/GH100_H100_SXM5_80GB" {
		t.Errorf("auto gpuForModel = %+v, %v", g, ok)
	}

	mapped := DefaultRackConfig()
	mapped.GPUModel = "L40S"
	mapped.GPUResources = []GPUResource{{Resource: "nvidia.com/AD102GL_L40S", Model: "L40S", DeviceName: "nvidia.com/AD102GL"}}
	if g, ok := mapped.gpuForModel("L40S"); !ok || g.deviceName() != "nvidia.com/AD102GL" {
		t.Errorf("mapped gpuForModel = %+v, %v", g, ok)
	}
	if _, ok := mapped.gpuForModel("GH100_H100_SXM5_80GB"); ok {
		t.Error("mapped gpuForModel found an unmapped model")
	}
	if _, ok := mapped.gpuForResource("nvidia.com/GH100_H100_SXM5_80GB"); ok {
		t.Error("mapped gpuForResource found an unmapped resource")
	}
}
