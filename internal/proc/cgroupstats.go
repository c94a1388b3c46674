package proc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CgroupStats is what the user cgroup uses and suffered, for health and
// metrics.
type CgroupStats struct {
	MemoryCurrent int64 `json:"memory_current"`
	MemoryPeak    int64 `json:"memory_peak"`
	MemoryMax     int64 `json:"memory_max"`
	MemoryHigh    int64 `json:"memory_high"`
	Tasks         int64 `json:"tasks"`
	TasksMax      int64 `json:"tasks_max"`
	// OOMKills counts processes the OOM killer ended in the user cgroup;
	// ForkRefusals forks refused at pids.max.
	OOMKills int64 `json:"oom_kills"`
	// RunawayKills counts commands the process guard killed for having
	// too many processes (procguard.go).
	RunawayKills int64 `json:"runaway_kills"`
	ForkRefusals int64 `json:"fork_refusals"`
	// SpareStarts counts the starts that went to the spare because work
	// was at its pids.max or stalled at its memory limit.
	SpareStarts int64 `json:"spare_starts"`
	// CPUPressure is the share of the last 10 s in which some user task
	// waited for a CPU (cpu.pressure's some avg10), in percent.
	CPUPressure float64 `json:"cpu_pressure_avg10"`
}

// Isolation is what /health says of the user cgroup: on, with what it
// uses; or off, and why.
type Isolation struct {
	State  string `json:"state"` // "on" or "off"
	Reason string `json:"reason,omitempty"`
	*CgroupStats
}

// Isolation reads the user cgroup's state for /health.
func (c *Cgroups) Isolation() Isolation {
	if !c.On() {
		why := "no cgroup layout"
		if c != nil {
			why = c.Off
		}
		return Isolation{State: "off", Reason: why}
	}
	st := c.Stats()
	return Isolation{State: "on", CgroupStats: &st}
}

// Stats reads the user cgroup's counters; zero when isolation is off.
func (c *Cgroups) Stats() CgroupStats {
	if !c.On() {
		return CgroupStats{}
	}
	st := CgroupStats{MemoryMax: c.Limits.MemoryMax, MemoryHigh: c.Limits.MemoryHigh, TasksMax: c.Limits.PidsMax}
	st.MemoryCurrent = readInt(filepath.Join(c.user, "memory.current"))
	st.MemoryPeak = readInt(filepath.Join(c.user, "memory.peak"))
	st.Tasks = readInt(filepath.Join(c.user, "pids.current"))
	// The kernel's kills and the memory guard's (memguard.go).
	st.OOMKills = keyed(filepath.Join(c.user, "memory.events"), "oom_kill") + c.guardKills.Load()
	st.RunawayKills = c.runawayKills.Load()
	st.SpareStarts = c.spareStarts.Load()
	// A refused fork is counted where it was tried (pids.events is not
	// hierarchical before Linux 6.13): in work or in spare.
	for _, d := range []string{"", "work", "spare"} {
		st.ForkRefusals += keyed(filepath.Join(c.user, d, "pids.events"), "max")
	}
	st.CPUPressure = pressure(filepath.Join(c.user, "cpu.pressure"), "some")
	return st
}

// pressure reads avg10 of the line kind ("some", "full") of a PSI file.
func pressure(file, kind string) float64 {
	n, _ := strconv.ParseFloat(psiField(file, kind, "avg10"), 64)
	return n
}

// pressureTotal reads total= (µs stalled since boot) of the line kind of
// a PSI file.
func pressureTotal(file, kind string) int64 {
	n, _ := strconv.ParseInt(psiField(file, kind, "total"), 10, 64)
	return n
}

// psiField reads one key=value field of the line kind of a PSI file; ""
// when the file or the field is missing.
func psiField(file, kind, key string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	return psiValue(string(b), kind, key)
}

// psiValue is one key=value field of the line kind of a PSI file's text
// b; "" when missing.
func psiValue(b, kind, key string) string {
	for _, line := range strings.Split(b, "\n") {
		rest, ok := strings.CutPrefix(line, kind+" ")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			if v, ok := strings.CutPrefix(f, key+"="); ok {
				return v
			}
		}
	}
	return ""
}

func readInt(file string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// keyed reads "key value" lines (memory.events, pids.events).
func keyed(file, key string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
