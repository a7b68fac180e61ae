package k8sworker

import (
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// domainXML is the shape of what virt-launcher hands the hook
// (xml.MarshalIndent of its DomainSpec), cut short.
const domainXML = `<domain type="kvm" xmlns:qemu="http://libvirt.org/schemas/domain/qemu/1.0">
	<name>cosmicac_vmi</name>
	<sysinfo type="smbios">
		<system></system>
	</sysinfo>
	<devices>
		<controller type="usb" index="0" model="none"></controller>
		<disk device="disk" type="file"></disk>
	</devices>
</domain>`

type hookedDomain struct {
	Controllers []struct {
		Type  string `xml:"type,attr"`
		Model string `xml:"model,attr"`
		Hole  *struct {
			Unit  string `xml:"unit,attr"`
			Value string `xml:",chardata"`
		} `xml:"pcihole64"`
	} `xml:"devices>controller"`
	Sysinfo []struct {
		Type    string `xml:"type,attr"`
		Entries []struct {
			Name  string `xml:"name,attr"`
			Value string `xml:",chardata"`
		} `xml:"entry"`
	} `xml:"sysinfo"`
}

// The MMIO hook, run as sidecar-shim runs it, leaves well-formed XML with
// the window on pcie-root and OVMF's aperture; with a pcie-root there
// already (KubeVirt's disablePCIHole64), it replaces that controller's hole.
func TestPCIHole64Hook(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("sh is not on PATH: %v", err)
	}
	script := filepath.Join(t.TempDir(), "onDefineDomain")
	if err := os.WriteFile(script, []byte(PCIHole64Hook(1024)), 0o755); err != nil {
		t.Fatal(err)
	}
	withRoot := `<domain type="kvm"><devices><controller type="pci" index="0" model="pcie-root"><pcihole64 unit="KiB">0</pcihole64></controller></devices></domain>`
	for name, in := range map[string]string{"no pcie-root": domainXML, "pcie-root": withRoot} {
		t.Run(name, func(t *testing.T) {
			out, err := exec.Command(sh, script, "--vmi", `{"kind":"VirtualMachineInstance"}`, "--domain", in).Output()
			if err != nil {
				t.Fatalf("hook: %v", err)
			}
			var d hookedDomain
			if err := xml.Unmarshal(out, &d); err != nil {
				t.Fatalf("hook output is not XML: %v\n%s", err, out)
			}
			var holes []string
			for _, c := range d.Controllers {
				if c.Model == "pcie-root" && c.Hole != nil {
					holes = append(holes, c.Hole.Value+" "+c.Hole.Unit)
				}
			}
			if len(holes) != 1 || holes[0] != "1073741824 KiB" {
				t.Errorf("pcie-root holes %v\n%s", holes, out)
			}
			var fw []string
			for _, s := range d.Sysinfo {
				for _, e := range s.Entries {
					if s.Type == "fwcfg" {
						fw = append(fw, e.Name+"="+e.Value)
					}
				}
			}
			if len(fw) != 1 || fw[0] != "opt/ovmf/X-PciMmio64Mb=1048576" {
				t.Errorf("fwcfg %v\n%s", fw, out)
			}
		})
	}
}
