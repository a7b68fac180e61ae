// Package benchtest describes the machine a benchmark ran on, for the
// tables of docs/benchmarks.md: the CPU model and the load average.
//
// Importers: tests only.
package benchtest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

// CPUModel is the first "model name" of /proc/cpuinfo ("unknown"
// elsewhere).
func CPUModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
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
