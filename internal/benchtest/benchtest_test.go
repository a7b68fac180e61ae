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
