package benchtest

import (
	"os"
	"strings"
	"testing"
)

// The machine's line names the CPU and the load where /proc has them, and
// says "unknown" where it does not (never an empty figure).
func TestMachineSaysTheCPU(t *testing.T) {
	_, cpuErr := os.Stat("/proc/cpuinfo")
	_, loadErr := os.Stat("/proc/loadavg")
	m, l := CPUModel(), LoadAverage()
	if (cpuErr == nil) == (m == "unknown") || m == "" {
		t.Errorf("CPUModel() = %q with /proc/cpuinfo's stat error %v", m, cpuErr)
	}
	if loadErr == nil && len(strings.Fields(l)) != 3 {
		t.Errorf("LoadAverage() = %q, want three numbers", l)
	}
	if loadErr != nil && l != "unknown" {
		t.Errorf("LoadAverage() = %q without /proc/loadavg, want unknown", l)
	}
	if got := Machine("1 2 3"); !strings.Contains(got, "CPU: "+m) || !strings.Contains(got, "before: 1 2 3") {
		t.Errorf("Machine = %q", got)
	}
}

// The name comes with the numbers that tell a CPU's generation when the
// hypervisor shortens it, from the first CPU's block only.
func TestCPUModelFromCPUInfo(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\nstepping\t: 1\n\nprocessor\t: 1\nmodel name\t: Other\n",
			"AMD EPYC (family 25, model 1, stepping 1)"},
		{"processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz\ncpu family\t: 6\nmodel\t\t: 106\n",
			"Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz (family 6, model 106)"},
		{"processor\t: 0\nmodel name\t: ARMv8 Processor\n", "ARMv8 Processor"},
		{"processor\t: 0\nCPU implementer\t: 0x41\n", "unknown"},
		{"", "unknown"},
	} {
		if got := cpuModel(c.in); got != c.want {
			t.Errorf("cpuModel(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
