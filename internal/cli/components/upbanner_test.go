package components

import (
	"testing"

	"github.com/cosmicac/cosmicac/internal/k8sworker"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/qemu"
	"github.com/cosmicac/cosmicac/internal/qemuworker"
)

// The banner's "Try:" job names a location and an image the rack `up`
// runs has: `--rack qemu`'s location and catalogue, not the simulated
// rack's (issue 32).
func TestUpTryJobFitsTheRack(t *testing.T) {
	sim := platform.DefaultConfig("")
	if loc, img := tryJob(sim); loc != "us" || img != SimImage {
		t.Errorf("simulated rack: --location %s --image %s", loc, img)
	}
	q := platform.DefaultConfig("")
	q.QEMU = &platform.QEMUConfig{Rack: qemuworker.Config{Rack: "qemu-1", Location: "local"},
		Images: qemu.Catalogue{"debian-12": {}, "ubuntu-24.04": {}}}
	if loc, img := tryJob(q); loc != "local" || img != "debian-12" {
		t.Errorf("QEMU rack: --location %s --image %s, want local and debian-12", loc, img)
	}
	k := platform.DefaultConfig("")
	rc := k8sworker.DefaultRackConfig()
	rc.Location = "eu"
	k.Kube = &platform.KubeConfig{Rack: rc}
	if loc, _ := tryJob(k); loc != "eu" {
		t.Errorf("Kubernetes rack: --location %s, want eu", loc)
	}
}
