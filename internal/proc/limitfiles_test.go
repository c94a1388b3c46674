package proc

import (
	"strconv"
	"testing"
)

// TestLimitFiles: what the layout writes, without cgroup v2 (the VM's
// TestCgroupV2Spare sees the same files in a real hierarchy). The spare
// keeps its share of the user's tasks out of work's reach, so `ps` and
// `kill` start after a fork bomb; work and the spare together get the
// user's tasks and no more; the spare's CPU weight is above work's; and
// the agent's weights are above the user's.
func TestLimitFiles(t *testing.T) {
	for _, pids := range []int64{16, 300, DefaultUserPids} {
		c := &Cgroups{user: "/cg/user", agent: "/cg/agent", hooks: "/cg/hooks",
			Limits: CgroupLimits{MemoryMax: 512 << 20, MemoryHigh: 512 << 20, PidsMax: pids, CPUWeight: 100, IOWeight: 100}}
		got := map[string]int64{}
		for _, f := range c.limitFiles() {
			v, err := strconv.ParseInt(f.value, 10, 64)
			if f.value == "max" {
				v = -1
			} else if err != nil { // "default N"
				v, _ = strconv.ParseInt(f.value[len("default "):], 10, 64)
			}
			got[f.file] = v
		}
		work, spare, user := got["/cg/user/work/pids.max"], got["/cg/user/spare/pids.max"], got["/cg/user/pids.max"]
		if user != pids || spare != SparePids(pids) || spare < 8 || work+spare != user {
			t.Errorf("pids.max %d: user %d, work %d, spare %d; want work + spare = user and the spare %d", pids, user, work, spare, SparePids(pids))
		}
		if got["/cg/user/spare/cpu.weight"] <= 100 {
			t.Errorf("the spare's cpu.weight %d is not above work's (100)", got["/cg/user/spare/cpu.weight"])
		}
		if got["/cg/agent/cpu.weight"] <= got["/cg/user/cpu.weight"] || got["/cg/agent/io.weight"] <= got["/cg/user/io.weight"] {
			t.Errorf("the agent's weights (cpu %d, io %d) are not above the user's (%d, %d)", got["/cg/agent/cpu.weight"], got["/cg/agent/io.weight"], got["/cg/user/cpu.weight"], got["/cg/user/io.weight"])
		}
		if w, spare := got["/cg/user/work/memory.max"], SpareMemory(c.Limits); spare < 16<<20 || w+spare != 512<<20 || got["/cg/user/work/memory.high"] != -1 {
			t.Errorf("work's memory.max %d and memory.high %d, the spare's memory %d: want work + spare = the user's 512 MiB, memory.high max", w, got["/cg/user/work/memory.high"], spare)
		}
		if got["/cg/user/memory.max"] != 512<<20 || got["/cg/hooks/memory.max"] != 512<<20 || got["/cg/hooks/pids.max"] != HookPids {
			t.Errorf("memory.max %d, the hooks' %d and pids.max %d", got["/cg/user/memory.max"], got["/cg/hooks/memory.max"], got["/cg/hooks/pids.max"])
		}
	}
}

// TestSpareMemoryWithSwap: where memory.high is below memory.max (swap),
// work is throttled the spare's memory before the user is, so a start in
// the spare is not throttled for work's use; and at the floor of the
// user's memory work keeps most of it.
func TestSpareMemoryWithSwap(t *testing.T) {
	for _, l := range []CgroupLimits{
		{MemoryMax: 1 << 30, MemoryHigh: 900 << 20},
		{MemoryMax: 1 << 30, MemoryHigh: MinUserMemory},
		{MemoryMax: MinUserMemory, MemoryHigh: MinUserMemory},
	} {
		c := &Cgroups{user: "/cg/user", agent: "/cg/agent", hooks: "/cg/hooks", Limits: l}
		got := map[string]string{}
		for _, f := range c.limitFiles() {
			got[f.file] = f.value
		}
		spare := SpareMemory(l)
		wantHigh := "max"
		if l.MemoryHigh < l.MemoryMax {
			wantHigh = strconv.FormatInt(l.MemoryHigh-spare, 10)
		}
		if got["/cg/user/work/memory.high"] != wantHigh || got["/cg/user/work/memory.max"] != strconv.FormatInt(l.MemoryMax-spare, 10) {
			t.Errorf("limits %+v: work's memory.high %s, memory.max %s; want %s and the user's less %d", l, got["/cg/user/work/memory.high"], got["/cg/user/work/memory.max"], wantHigh, spare)
		}
		if spare > l.MemoryHigh/4 || spare < 16<<20 {
			t.Errorf("limits %+v: the spare's memory %d MiB; want 16 MiB to a quarter of memory.high", l, spare>>20)
		}
	}
}
