package k8sworker

import (
	"encoding/json"
	"strconv"
	"strings"
)

// The 64-bit PCI MMIO window (RackConfig.Firmware.PCIHole64GiB).
//
// KubeVirt v1.9 has no field for its size: kubevirt.io/api core/v1
// types.go has only the annotation kubevirt.io/disablePCIHole64, and
// virt-launcher's converter (pkg/virt-launcher/virtwrap/converter/compute/
// controllers.go in kubevirt.io/kubevirt) emits a pcie-root controller only
// to set the window to 0. What KubeVirt documents for domain settings it has
// no field for is a hook sidecar (cmd/sidecars/README.md: the Sidecar
// feature gate, the annotation hooks.kubevirt.io/hookSidecars of
// pkg/hooks/hooks.go, and its sidecar-shim, which runs an onDefineDomain
// script from a ConfigMap with --vmi JSON --domain XML and takes the
// domain XML it prints). The worker puts that script in the job's root
// ConfigMap (HookScriptKey) and points each VMI's annotation at it.

const (
	// AnnotationHookSidecars is KubeVirt's hook sidecar list annotation.
	AnnotationHookSidecars = "hooks.kubevirt.io/hookSidecars"
	// HookScriptKey is the root ConfigMap's key of the onDefineDomain script.
	HookScriptKey = "onDefineDomain"
	// hookPath is where sidecar-shim looks for the script ($PATH).
	hookPath = "/usr/bin/onDefineDomain"
	// hookVersion is the hook protocol sidecar-shim speaks.
	hookVersion = "v1alpha2"
)

// hookSidecar is one element of the hooks.kubevirt.io/hookSidecars list
// (kubevirt.io/kubevirt pkg/hooks.HookSidecar: the fields used).
type hookSidecar struct {
	Image     string         `json:"image,omitempty"`
	Args      []string       `json:"args"`
	ConfigMap *hookConfigMap `json:"configMap"`
}

type hookConfigMap struct {
	Name     string `json:"name"`
	Key      string `json:"key"`
	HookPath string `json:"hookPath"`
}

// hookSidecars is the annotation's value for a VMI of job.
func hookSidecars(cfg RackConfig, jobID string) string {
	b, _ := json.Marshal([]hookSidecar{{ // plain strings always marshal
		Image:     cfg.Firmware.HookSidecarImage,
		Args:      []string{"--version", hookVersion},
		ConfigMap: &hookConfigMap{Name: RootName(jobID), Key: HookScriptKey, HookPath: hookPath},
	}})
	return string(b)
}

// PCIHole64Hook is the onDefineDomain script that gives the domain a 64-bit
// PCI hole of gib GiB: a <pcihole64> on the pcie-root controller (QEMU's
// q35 pci-hole64-size) and OVMF's fw_cfg opt/ovmf/X-PciMmio64Mb (the
// aperture UEFI itself maps) as a libvirt fwcfg sysinfo. It is POSIX sh and
// sed, what sidecar-shim's image has.
func PCIHole64Hook(gib int) string {
	kib := strconv.Itoa(gib << 20)
	mib := strconv.Itoa(gib << 10)
	hole := `<pcihole64 unit="KiB">` + kib + `</pcihole64>`
	fwcfg := `<sysinfo type="fwcfg"><entry name="opt/ovmf/X-PciMmio64Mb">` + mib + `</entry></sysinfo>`
	return strings.Join([]string{
		"#!/bin/sh",
		"# KubeVirt onDefineDomain hook (sidecar-shim): --vmi JSON --domain XML;",
		"# prints the domain with a 64-bit PCI MMIO window of " + strconv.Itoa(gib) + " GiB.",
		"set -eu",
		"domain=",
		`while [ $# -gt 0 ]; do`,
		`  case $1 in`,
		`  --domain) domain=$2; shift 2 ;;`,
		`  *) shift ;;`,
		`  esac`,
		`done`,
		`case $domain in`,
		`*'model="pcie-root"'*)`,
		`  printf '%s\n' "$domain" | sed -e 's|<pcihole64[^<]*</pcihole64>||' -e 's|\(<controller type="pci" index="0" model="pcie-root"[^>]*>\)|\1` + hole + `|' -e 's|</domain>|` + fwcfg + `</domain>|' ;;`,
		`*)`,
		`  printf '%s\n' "$domain" | sed -e 's|<devices>|<devices><controller type="pci" index="0" model="pcie-root">` + hole + `</controller>|' -e 's|</domain>|` + fwcfg + `</domain>|' ;;`,
		`esac`,
		"",
	}, "\n")
}
