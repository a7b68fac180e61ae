// Package benchtest describes the machine a benchmark ran on, for the
// tables of docs/benchmarks.md (the CPU model and the load average), and
// starts the baselines a serving path is measured against: nginx as one
// hop or two, with TLS between them or not, and Go byte relays.
//
// Importers: tests only.
package benchtest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

// CPUModel is the first CPU's "model name" of /proc/cpuinfo, with its
// family, model and stepping: under a hypervisor the name is often only
// "AMD EPYC", and those numbers tell the generation (family 25, model 1
// is Zen 3, Milan). "unknown" elsewhere.
func CPUModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return cpuModel(string(b))
}

func cpuModel(cpuinfo string) string {
	f := map[string]string{}
	for line := range strings.Lines(cpuinfo) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			if strings.TrimSpace(line) == "" && len(f) > 0 {
				break // the end of the first CPU's block
			}
			continue
		}
		f[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	name := f["model name"]
	if name == "" {
		return "unknown"
	}
	if f["cpu family"] == "" || f["model"] == "" {
		return name
	}
	id := fmt.Sprintf("family %s, model %s", f["cpu family"], f["model"])
	if st := f["stepping"]; st != "" {
		id += ", stepping " + st
	}
	return name + " (" + id + ")"
}

// LoadAverage is /proc/loadavg's three load averages ("unknown"
// elsewhere).
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// Machine is one line saying the CPU, its cores, and the load averages
// before (as LoadAverage gave when the benchmark began) and now.
func Machine(loadBefore string) string {
	return fmt.Sprintf("CPU: %s, %d cores (GOMAXPROCS %d); load average before: %s, after: %s",
		CPUModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), loadBefore, LoadAverage())
}
