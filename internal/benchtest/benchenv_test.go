package benchtest

import (
	"os"
	"strings"
	"testing"
)

func TestMachineSaysTheCPU(t *testing.T) {
	if _, err := os.Stat("/proc/cpuinfo"); err != nil {
		t.Skip("no /proc/cpuinfo here")
	}
	if m := CPUModel(); m == "unknown" || m == "" {
		t.Errorf("CPUModel() = %q with a /proc/cpuinfo", m)
	}
	if l := LoadAverage(); len(strings.Fields(l)) != 3 {
		t.Errorf("LoadAverage() = %q, want three numbers", l)
	}
	if m := Machine("1 2 3"); !strings.Contains(m, CPUModel()) || !strings.Contains(m, "before: 1 2 3") {
		t.Errorf("Machine = %q", m)
	}
}
