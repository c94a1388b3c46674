package e2e

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/internal/runaway"
)

// footingSampler runs in the guest, outside the user cgroup (in the
// root cgroup) at a real-time priority, and samples every second, with
// one head and one grep (so it costs the rest little), what says where
// the time goes: per-cgroup pressure and
// CPU use, the agent's threads' run and run-queue wait (schedstat, ns)
// and its faults, the softirq counts and the tasks. It stops after $2
// samples.
const footingSampler = `echo $$ > /sys/fs/cgroup/cgroup.procs
chrt -f -p 10 $$ >/dev/null 2>&1
agent=$1; n=$2; i=0
cg=/sys/fs/cgroup/rayito
head -v /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag /proc/sys/vm/oom_dump_tasks /proc/sys/kernel/printk
while [ $i -lt $n ]; do
  i=$((i+1))
  echo "== sample $i"
  head -v -n 100 /proc/uptime $cg/agent/cpu.pressure $cg/agent/cpu.stat $cg/user/cpu.pressure $cg/user/memory.pressure \
    $cg/user/cpu.stat $cg/user/pids.current $cg/user/work/pids.current $cg/user/spare/pids.current $cg/user/memory.current \
    $cg/user/memory.events /proc/$agent/task/*/schedstat /proc/$agent/stat /proc/softirqs /proc/loadavg \
    /proc/pressure/cpu /proc/pressure/memory /proc/pressure/io /proc/meminfo 2>&1
  grep -E '^(pgmajfault|pgscan_direct|pgsteal_direct|workingset_refault_file|oom_kill) ' /proc/vmstat
  sleep 1
done`

// TestAgentKeepsItsFooting: a memory hog, the shell's fork bomb and eight
// busy loops (internal/runaway), all at once and at the default priority,
// in a VM of 1 vCPU and 1 GiB. While they run, /health answers every
// probe (5 s bound) with a p99 of at most max(5 x the idle p99, 100 ms)
// and under 1 s, exec echo ok succeeds every time within 10 s, the hog
// ends oom_killed within 60 s of its start, and the agent answers within
// 1 s of the load's end. The guest's samples (footingSampler) are logged
// when it fails, or with RAYITO_FOOTING_DIAG=1.
//
// Not in make test yet (RAYITO_E2E_FOOTING=1 runs it): in 5 of 6 runs
// /health's p99 passed its bound (190 to 890 ms against 100 to 150), and
// in 3 an exec at the hog's OOM kill ran past its 10 s: while user work
// sits at its memory limit, every task in the VM waits for seconds, a
// real-time one outside user work too (docs/benchmarks.md, "The agent
// keeps its footing").
// TestAgentStaysInCharge runs the same load one part at a time.
func TestAgentKeepsItsFooting(t *testing.T) {
	if os.Getenv("RAYITO_E2E_FOOTING") != "1" {
		t.Skip("the whole runaway load at once: RAYITO_E2E_FOOTING=1 (not yet within its bounds every time)")
	}
	tv := vmConfig(t)
	tv.cfg.MemoryMiB = 1024
	v := bootHealthy(t, tv.cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := dial(t, ctx, v.AgentURL(), tv.token, client.Options{})
	g := guest{c}
	agentPid, err := g.agentPid(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sampler *client.Process
	r, err := runaway.Run(ctx, c, v.AgentURL(), runaway.Options{Started: func() {
		sampler, err = c.Exec(ctx, client.ExecOptions{Argv: []string{"/bin/sh", "-c", footingSampler + " > /tmp/footing.samples 2>&1", "sampler", strconv.Itoa(agentPid), "150"}})
		if err != nil {
			t.Fatal(err)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("under the load:\n%s", r)
	for _, p := range r.Problems() {
		t.Error(p)
	}
	timings.add(t, "footing: /health p99 idle", runaway.Quantile(r.IdleHealth, 99))
	timings.add(t, "footing: /health p99 under the default-priority load", runaway.Quantile(r.Health, 99))
	timings.add(t, "footing: exec echo ok p99 idle", runaway.Quantile(r.IdleExec, 99))
	timings.add(t, "footing: exec echo ok p99 under the default-priority load", runaway.Quantile(r.Exec, 99))
	if sampler != nil {
		sampler.Signal(ctx, client.SIGKILL)
		sampler.Wait(ctx)
	}
	if t.Failed() || os.Getenv("RAYITO_FOOTING_DIAG") != "" {
		samples, _ := g.c.Files().ReadFile(ctx, "/tmp/footing.samples")
		kmsg, _ := g.sh(ctx, "dmesg | tail -n 60")
		t.Logf("the guest's samples, a second apart:\n%s\nthe kernel's last words:\n%s", samples, kmsg)
	}
}
