package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/internal/envdapi/gen/process"
	"github.com/rayito/rayito-agent/internal/envdapi/gen/process/processconnect"
	"github.com/rayito/rayito-agent/internal/runaway"
)

// isolationPids is the user cgroup's pids.max in the isolation test's
// image: small, so that the fork bomb meets it at once under TCG.
const isolationPids = 300

// forkBomb starts sleeps for ever, trying again when a fork is refused.
const forkBomb = `import os, time
while True:
    try:
        os.spawnlp(os.P_NOWAIT, "sleep", "sleep", "600")
    except OSError:
        time.sleep(0.01)`

var isolationImage = tokenImage{env: []string{"RAYITO_USER_PIDS_MAX=" + strconv.Itoa(isolationPids)}}

// TestAgentStaysInCharge: user work runs in the user cgroup under limits,
// so a memory hog, a fork bomb and eight busy loops leave the agent
// answering: /health and an exec answer every time (one at the bomb's
// pids.max takes the spare, so the user can kill the bomb), a running
// cell completes, the hog ends oom_killed, the agent is never killed and
// stays small, and everything is back to normal once the hogs are gone.
// Commands of the envd surface and kernels of jupyter_server's API are
// in the user cgroup too.
func TestAgentStaysInCharge(t *testing.T) {
	tv := vmConfigOf(t, &isolationImage)
	v := bootHealthy(t, tv.cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := dial(t, ctx, v.AgentURL(), tv.token, client.Options{})
	g := guest{c}
	h, err := c.Health(ctx)
	if err != nil || h.Isolation == nil || h.Isolation.State != "on" || h.Isolation.TasksMax != isolationPids {
		t.Fatalf("health: isolation %+v, %v; want on with pids.max %d", h.Isolation, err, isolationPids)
	}
	t.Logf("user cgroup: memory.max %d MiB, memory.high %d MiB", h.Isolation.MemoryMax>>20, h.Isolation.MemoryHigh>>20)
	agentPid, err := g.agentPid(ctx)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("the cgroup v2 tests of internal/proc, in the guest", func(t *testing.T) { runProcCgroupTests(t, ctx, g) })

	// The layout the agent made.
	if got, err := g.c.Files().ReadFile(ctx, fmt.Sprintf("/proc/%d/cgroup", agentPid)); err != nil || strings.TrimSpace(string(got)) != "0::/rayito/agent" {
		t.Errorf("the agent is in cgroup %q (%v), want /rayito/agent", got, err)
	}

	// Every surface's processes are born in the user cgroup.
	inUser := func(what string, pid int) {
		t.Helper()
		out, err := g.run(ctx, "cat", fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil || !strings.Contains(out, "/rayito/user") {
			t.Errorf("%s (pid %d) is in cgroup %q (%v), want the user cgroup", what, pid, strings.TrimSpace(out), err)
		}
	}
	p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	inUser("a native command", p.Pid())
	pc := processconnect.NewProcessClient(http.DefaultClient, v.AgentURL())
	req := connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"600"}}})
	req.Header().Set("X-Access-Token", tv.token)
	es, err := pc.Start(ctx, req)
	if err != nil || !es.Receive() {
		t.Fatalf("envd Start: %v %v", err, es.Err())
	}
	inUser("an envd command", int(es.Msg().GetEvent().GetStart().GetPid()))
	es.Close()
	kreq, _ := http.NewRequestWithContext(ctx, "POST", v.AgentURL()+"/api/kernels", strings.NewReader(`{"name":"python3"}`))
	kreq.Header.Set("Authorization", "token "+tv.token)
	if resp, err := http.DefaultClient.Do(kreq); err != nil || resp.StatusCode != 201 {
		t.Fatalf("POST /api/kernels: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	ks, err := c.Kernels(ctx)
	if err != nil || len(ks) == 0 {
		t.Fatalf("kernels: %v %v", ks, err)
	}
	inUser("a jupyter_server kernel", ks[0].Pid)
	k := c.Kernel(ks[0].Kernel)

	// The idle baseline, in this VM.
	probe := func(n int, withExec bool) (health, exec []time.Duration) {
		t.Helper()
		for range n {
			started := time.Now()
			hctx, hcancel := context.WithTimeout(ctx, time.Minute)
			_, err := client.GetHealth(hctx, v.AgentURL(), nil)
			hcancel()
			if err != nil {
				t.Fatalf("/health did not answer: %v", err)
			}
			health = append(health, time.Since(started))
			if !withExec {
				continue
			}
			started = time.Now()
			if out, err := g.run(ctx, "echo", "ok"); err != nil || out != "ok\n" {
				t.Fatalf("exec echo ok: %q %v", out, err)
			}
			exec = append(exec, time.Since(started))
		}
		return health, exec
	}
	idleHealth, idleExec := probe(20, true)
	t.Logf("idle baseline measured; starting the hogs")

	// A cell runs through it all.
	cell, err := k.Run(ctx, "import time\nfor i in range(60):\n    time.sleep(0.1)\nprint('cell done')", client.ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The hogs, at the default priority (TestAgentKeepsItsFooting runs
	// them all at once; here one after the other, to see each limit
	// work). Each command is a CPU share of its own (a leaf of work), so
	// the memory hog beside the loops gets half of the user's CPU and
	// reaches its limit in seconds. It goes first, with the loops, and
	// ends oom_killed; then the bomb, with the loops, reaches pids.max
	// and stays there, trying again and again (a shell would give up at
	// its first refused fork, or soon). The hog touches a byte of each
	// page rather than filling them: zero-filling 400 MiB on an emulated
	// CPU took minutes.
	loops, err := c.Exec(ctx, client.ExecOptions{Argv: runaway.BusyLoops})
	if err != nil {
		t.Fatal(err)
	}
	hog, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"python3", "-c",
		"import mmap\na = []\nwhile True:\n    m = mmap.mmap(-1, 32 << 20)\n    for i in range(0, 32 << 20, 4096): m[i] = 1\n    a.append(m)"}})
	if err != nil {
		t.Fatal(err)
	}
	hogHealth, hogExec := probe(20, true)
	t.Logf("the agent answered every probe under the memory hog; waiting for its end")
	st, err := hog.Wait(ctx)
	if err != nil || !st.OOMKilled || st.Signal != "SIGKILL" {
		t.Errorf("the memory hog ended %+v, %v; want oom_killed", st, err)
	}

	bomb, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"python3", "-c", forkBomb}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		h, err := c.Health(ctx)
		if err != nil {
			t.Fatalf("health while the bomb grows: %v", err)
		}
		if h.Isolation.ForkRefusals > 0 {
			t.Logf("the bomb reached pids.max: %d tasks", h.Isolation.Tasks)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	// A command started now takes the spare: the user's way out.
	if out, err := g.run(ctx, "cat", "/proc/self/cgroup"); err != nil || !strings.Contains(out, "/rayito/user/spare") {
		t.Errorf("a command at the bomb's pids.max runs in %q (%v), want the spare", out, err)
	}
	bombHealth, bombExec := probe(20, true)
	if rss := agentRSS(t, ctx, g, agentPid); rss > 100<<10 {
		t.Errorf("the agent's RSS under load is %d KiB", rss)
	}

	ex, err := cell.Wait(ctx)
	if err != nil || ex.Status != client.StatusOK || ex.Stdout != "cell done\n" {
		t.Errorf("the cell under load: %+v, %v", ex, err)
	}
	h, err = c.Health(ctx)
	if err != nil || h.Isolation == nil || h.Isolation.OOMKills < 1 || h.Isolation.ForkRefusals < 1 || h.Isolation.SpareStarts < 1 || h.Isolation.MemoryPeak < h.Isolation.MemoryMax*9/10 {
		t.Errorf("health under load: %+v, %v; want an OOM kill, fork refusals, starts in the spare, a peak near memory.max", h.Isolation, err)
	}
	t.Logf("under the hogs: %+v", *h.Isolation)

	// The hogs go; all is as before. The user kills the bomb and what it
	// forked from a command, as a user would.
	if _, err := g.run(ctx, "sh", "-c", "kill -KILL "+strconv.Itoa(bomb.Pid())+"; pkill -KILL -x sleep; true"); err != nil {
		t.Errorf("killing the bomb from a command: %v", err)
	}
	loops.Signal(ctx, client.SIGKILL)
	for i, l := range []*client.Process{loops, bomb} {
		// Each ran until killed here: one that ended early did not press.
		if st, err := l.Wait(ctx); err != nil || st.Signal != "SIGKILL" {
			t.Errorf("hog %d ended %+v, %v; want killed by the test", i, st, err)
		}
	}
	afterHealth, afterExec := probe(5, true)
	if pid, err := g.agentPid(ctx); err != nil || pid != agentPid {
		t.Errorf("the agent is pid %d (%v), was %d: it was killed", pid, err, agentPid)
	}
	if out, err := g.sh(ctx, "for i in 1 2 3; do sleep 0.1 & done; wait; echo forked"); err != nil || out != "forked\n" {
		t.Errorf("forks after the bomb: %q %v", out, err)
	}

	p99 := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[(len(s)*99+99)/100-1]
	}
	for _, row := range []struct {
		name, load          string
		idle, busy, settled []time.Duration
	}{
		{"/health", "a memory hog and 8 busy loops", idleHealth, hogHealth, afterHealth},
		{"/health", "a fork bomb at pids.max and 8 busy loops", idleHealth, bombHealth, afterHealth},
		{"exec echo ok", "a memory hog and 8 busy loops", idleExec, hogExec, afterExec},
		{"exec echo ok", "a fork bomb at pids.max and 8 busy loops", idleExec, bombExec, afterExec},
	} {
		timings.add(t, "isolation: "+row.name+" p99 under "+row.load, p99(row.busy))
		t.Logf("%s p99: idle %v, under %s %v (%.1fx), after %v", row.name, p99(row.idle), row.load, p99(row.busy),
			float64(p99(row.busy))/float64(p99(row.idle)), p99(row.settled))
	}
	timings.add(t, "isolation: /health p99 idle", p99(idleHealth))
	timings.add(t, "isolation: exec echo ok p99 idle", p99(idleExec))
}

// agentRSS is the agent's resident memory in KiB. It reads through the
// files API, which needs no new process (none can start at pids.max).
func agentRSS(t *testing.T, ctx context.Context, g guest, pid int) int {
	t.Helper()
	r, err := g.c.Files().ReadFile(ctx, fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(r), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return 0
}

// runProcCgroupTests builds internal/proc's tests, copies them into the
// guest and runs its TestCgroupV2 tests there, from the guest's root
// cgroup (they make a layout of their own next to the agent's): this
// machine has no cgroup v2 to run them on.
func runProcCgroupTests(t *testing.T, ctx context.Context, g guest) {
	bin := filepath.Join(t.TempDir(), "proc.test")
	build := exec.Command("go", "test", "-c", "-o", bin, "../../internal/proc")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building internal/proc's tests: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.c.Files().WriteFile(ctx, "/root/proc.test", b, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := g.exec(ctx, client.ExecOptions{Argv: []string{"/bin/sh", "-c",
		`echo $$ > /sys/fs/cgroup/cgroup.procs && exec /root/proc.test -test.run '^TestCgroupV2' -test.v -test.count=1`}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("in the guest:\n%s%s", out.stdout, out.stderr)
	if out.status.ExitCode() != 0 || strings.Contains(out.stdout, "--- SKIP") || !strings.Contains(out.stdout, "--- PASS: TestCgroupV2OOMKill") {
		t.Errorf("internal/proc's cgroup v2 tests in the guest: %s", out.status)
	}
}
