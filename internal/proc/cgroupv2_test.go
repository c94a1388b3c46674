package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// testCgroupName is the layout the test makes, next to the agent's.
const testCgroupName = "rayito-proc-test"

// cgroupV2Root skips unless the test can make a layout of its own: root,
// a writable cgroup v2 at DefaultCgroupMount, the test in its root cgroup.
// rootfs/e2e runs this package's TestCgroupV2 tests in the VM, whose image
// mounts cgroup v2.
func cgroupV2Root(t *testing.T) string {
	t.Helper()
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(DefaultCgroupMount, &sfs); err != nil || sfs.Type != unix.CGROUP2_SUPER_MAGIC {
		t.Skipf("no cgroup v2 at %s (this machine's controllers are on v1): rootfs/e2e runs this test in the VM", DefaultCgroupMount)
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to make cgroups")
	}
	if own, err := ownCgroup(); err != nil || own != "/" {
		t.Skipf("the test is in cgroup %q, not the root: it makes its layout from the root, as the agent in the image does", own)
	}
	return DefaultCgroupMount
}

// layoutForTest makes a layout with small limits, moves the test into its
// agent cgroup, and undoes it all at the end.
func layoutForTest(t *testing.T, l CgroupLimits) *Cgroups {
	mount := cgroupV2Root(t)
	l, err := UserLimitsFor(l, Memory())
	if err != nil {
		t.Fatal(err)
	}
	c := setupCgroups(mount, testCgroupName, l)
	base := filepath.Join(mount, testCgroupName)
	t.Cleanup(func() {
		write(filepath.Join(mount, "cgroup.procs"), strconv.Itoa(os.Getpid()))
		c.Close()
		// cgroup.kill ends every user process the test left, at once.
		write(filepath.Join(base, "user", "cgroup.kill"), "1")
		write(filepath.Join(base, "hooks", "cgroup.kill"), "1")
		leaves, _ := filepath.Glob(filepath.Join(base, "user", "work", leafPrefix+"*"))
		for _, d := range append(leaves, "user/work", "user/spare", "user", "hooks", "agent", "") {
			if !filepath.IsAbs(d) {
				d = filepath.Join(base, d)
			}
			for range 100 {
				if err := syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	})
	if !c.On() {
		t.Fatalf("isolation is off: %s", c.Off)
	}
	return c
}

func readTrim(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(strings.TrimSpace(string(b)), "0::")
}

// isolated has the package's reaper start children in c until the end.
func isolated(t *testing.T, c *Cgroups, ooms *OOMKills) *Reaper {
	r := testReaper(t)
	r.Isolate(c, ooms)
	t.Cleanup(func() { r.Isolate(nil, nil) })
	return r
}

// TestCgroupV2Layout: the agent moves into BASE/agent, the limits are
// written where the layout says, and children are born in user/work.
func TestCgroupV2Layout(t *testing.T) {
	c := layoutForTest(t, CgroupLimits{MemoryMax: 128 << 20, PidsMax: 100, CPUWeight: 50})
	base := filepath.Join(DefaultCgroupMount, testCgroupName)
	if own, _ := ownCgroup(); own != "/"+testCgroupName+"/agent" {
		t.Fatalf("the test (as the agent) is in %q", own)
	}
	for file, want := range map[string]string{
		"user/memory.max":      strconv.Itoa(128 << 20),
		"user/memory.high":     strconv.FormatInt(c.Limits.MemoryHigh, 10),
		"user/pids.max":        "100",
		"user/work/pids.max":   "90",
		"user/spare/pids.max":  "10",
		"user/work/memory.max": strconv.FormatInt(128<<20-SpareMemory(c.Limits), 10),
		"user/cpu.weight":      "50",
		"agent/cpu.weight":     "10000",
		"hooks/pids.max":       strconv.Itoa(HookPids),
		"hooks/memory.max":     strconv.Itoa(128 << 20),
	} {
		if got := readTrim(t, filepath.Join(base, file)); got != want {
			t.Errorf("%s = %s, want %s", file, got, want)
		}
	}
	r := isolated(t, c, nil)
	pid, done, err := r.ForkExec("/bin/sleep", []string{"sleep", "60"}, &syscall.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cgroupOf(t, pid); !strings.HasPrefix(got, "/"+testCgroupName+"/user/work/"+leafPrefix) {
		t.Errorf("a child is born in %q, want a leaf of work", got)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	<-done
	if iso := c.Isolation(); iso.State != "on" || iso.MemoryMax != 128<<20 || iso.TasksMax != 100 {
		t.Errorf("isolation %+v", iso)
	}
}

// TestCgroupV2Spare: once work is full, a start takes the spare (the
// user's way out of a fork bomb); once both are full, a start is refused
// as a limit; the refusals are counted; and a lifecycle hook still starts,
// in the hooks' cgroup.
func TestCgroupV2Spare(t *testing.T) {
	c := layoutForTest(t, CgroupLimits{PidsMax: 40})
	r := isolated(t, c, nil)
	var pids []int
	var dones []<-chan Status
	defer func() {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}()
	for i := range 40 {
		pid, done, err := r.ForkExec("/bin/sleep", []string{"sleep", "600"}, &syscall.ProcAttr{})
		if err != nil {
			t.Fatalf("start %d: %v", i+1, err)
		}
		pids, dones = append(pids, pid), append(dones, done)
		want := "/" + testCgroupName + "/user/work/" + leafPrefix
		if i >= 32 {
			want = "/" + testCgroupName + "/user/spare"
		}
		if got := cgroupOf(t, pid); !strings.HasPrefix(got, want) {
			t.Fatalf("start %d is in %q, want %q", i+1, got, want)
		}
	}
	// A process in work cannot fork into the spare: the bomb stays put.
	// (Its slot is free once it is reaped.)
	syscall.Kill(pids[0], syscall.SIGKILL)
	<-dones[0]
	pids = pids[1:]
	sh, shDone, err := r.ForkExec("/bin/sh", []string{"sh", "-c", "sleep 600 & sleep 600 & wait"}, &syscall.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cgroupOf(t, sh); !strings.HasPrefix(got, "/"+testCgroupName+"/user/work/") {
		t.Fatalf("a start with room in work is in %q", got)
	}
	st := <-shDone
	if st.Wait.ExitStatus() == 0 {
		t.Errorf("a shell in the full work forked two children: %v", st.Wait)
	}
	// The shell's end left room in work: fill it again.
	pid, _, err := r.ForkExec("/bin/sleep", []string{"sleep", "600"}, &syscall.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	pids = append(pids, pid)
	reg := stream.NewRegistry(0)
	defer reg.Close()
	m := NewManager(reg, r, &Defaults{}, nil)
	defer m.Close()
	_, err = m.Exec(ExecOptions{Spec: Spec{Argv: []string{"true"}}})
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeLimit {
		t.Errorf("exec with work and spare full: %v, want a limit error", err)
	}
	if s := c.Stats(); s.Tasks < 39 || s.ForkRefusals < 3 || s.SpareStarts != 8 {
		t.Errorf("stats with both full: %+v", s)
	}
	// A post-clone hook renewing SSH keys must start all the same.
	hook, hookDone, err := r.ForkExecHook("/bin/sh", []string{"sh", "-c", "cat /proc/self/cgroup >&2; sleep 600"}, &syscall.ProcAttr{})
	if err != nil {
		t.Fatalf("a hook with work and spare full: %v", err)
	}
	if got := cgroupOf(t, hook); got != "/"+testCgroupName+"/hooks" {
		t.Errorf("a hook is born in %q", got)
	}
	syscall.Kill(hook, syscall.SIGKILL)
	<-hookDone
}

// TestCgroupV2SpareMemory: while work is at its memory limit, stalled
// (a process held at its memory.high, as a runaway is held at its limit
// until its OOM kill), a start goes to the spare and runs at once; the
// stalled process stays in work; and once it is killed, though the
// stall's 10 s average is still high, the next start goes to work (else
// a fork bomb started just after a hog's kill would fill the spare).
func TestCgroupV2SpareMemory(t *testing.T) {
	c := layoutForTest(t, CgroupLimits{MemoryMax: 256 << 20, MemoryHigh: 64 << 20})
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("needs python3 for the stalled process")
	}
	r := isolated(t, c, nil)
	work := filepath.Join(c.user, "work")
	pressure := func() string { return readTrim(t, filepath.Join(work, "memory.pressure")) }
	// Past memory.high without swap, each allocation sleeps in the
	// kernel, counted as a memory stall.
	hog, hogDone, err := r.ForkExec(python, []string{"python3", "-c", "a = []\nwhile True: a.append(bytearray(1 << 20))"}, &syscall.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	hogEnded := false
	defer func() {
		if !hogEnded {
			syscall.Kill(hog, syscall.SIGKILL)
		}
	}()
	deadline := time.Now().Add(90 * time.Second)
	for !c.stall.stalled() {
		if time.Now().After(deadline) {
			t.Fatalf("work is not stalled at its limit after 90 s: memory.current %s, memory.pressure %s", readTrim(t, filepath.Join(work, "memory.current")), pressure())
		}
		time.Sleep(200 * time.Millisecond)
	}
	in := func(what string) string {
		pid, done, err := r.ForkExec("/bin/sh", []string{"sh", "-c", "exit 7"}, &syscall.ProcAttr{})
		if err != nil {
			t.Fatalf("a start %s: %v", what, err)
		}
		got := cgroupOf(t, pid)
		if st := <-done; st.Wait.ExitStatus() != 7 {
			t.Errorf("the start %s ended %v", what, st.Wait)
		}
		return got
	}
	if c.StallOff != "" || c.stall.fired.Load() == 0 {
		t.Errorf("work stalled, its trigger never fired (%s)", c.StallOff)
	}
	if got := in("while work is stalled"); got != "/"+testCgroupName+"/user/spare" {
		t.Errorf("a start while work is stalled at its limit (%s) is born in %q, want the spare", pressure(), got)
	}
	if got := cgroupOf(t, hog); !strings.HasPrefix(got, "/"+testCgroupName+"/user/work/") {
		t.Errorf("the stalled process is in %q", got)
	}
	syscall.Kill(hog, syscall.SIGKILL)
	<-hogDone
	hogEnded = true
	if got := in("just after the stalled process's end"); !strings.HasPrefix(got, "/"+testCgroupName+"/user/work/") {
		t.Errorf("a start just after the stalled process's end (%s) is born in %q, want work", pressure(), got)
	}
	if s := c.Stats(); s.SpareStarts != 1 {
		t.Errorf("the spare took %d starts, want 1", s.SpareStarts)
	}
}

// TestCgroupV2OOMKill: a process past memory.max ends oom_killed, killed
// by the kernel's OOM killer or, where it thrashes at the limit instead
// (this hog at 64 MiB usually does), by the memory guard with its
// default setting; the kill is in the stats.
func TestCgroupV2OOMKill(t *testing.T) {
	c := layoutForTest(t, CgroupLimits{MemoryMax: 64 << 20})
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("needs python3 for the memory hog")
	}
	ooms, err := WatchOOMKills()
	if err != nil {
		t.Fatalf("the kernel log: %v", err)
	}
	defer ooms.Close()
	r := isolated(t, c, ooms)
	if err := c.GuardMemory(DefaultMemoryGuard, ooms, nil); err != nil {
		t.Fatal(err)
	}
	// A page at a time, touched: past 64 MiB within a second.
	hog := "import mmap\na = []\nwhile True:\n    m = mmap.mmap(-1, 16 << 20)\n    for i in range(0, 16 << 20, 4096): m[i] = 1\n    a.append(m)"
	started := time.Now()
	_, done, err := r.ForkExec(python, []string{"python3", "-c", hog}, &syscall.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	var st Status
	select {
	case st = <-done:
	case <-time.After(5 * time.Minute):
		t.Fatalf("the hog still runs after 5 minutes: %+v, memory.pressure %s", c.Stats(),
			readTrim(t, filepath.Join(c.user, "memory.pressure")))
	}
	if e := ExitEnd(st); e.Reason != stream.ReasonOOMKilled || e.Signal != "SIGKILL" {
		t.Fatalf("the hog ended %+v (wait status %v), want oom_killed", e, st.Wait)
	}
	s := c.Stats()
	if s.OOMKills < 1 || s.MemoryPeak < 64<<20-SpareMemory(c.Limits)-4<<20 {
		t.Errorf("stats after the kill: %+v", s)
	}
	t.Logf("the hog ended oom_killed after %v: %d by the kernel, %d by the memory guard",
		time.Since(started).Round(time.Second), s.OOMKills-c.guardKills.Load(), c.guardKills.Load())
}

// TestCgroupV2Freeze: frozen user work runs nothing, a start waits for
// the thaw, and both run again once thawed; the agent (here the test)
// keeps running throughout.
func TestCgroupV2Freeze(t *testing.T) {
	c := layoutForTest(t, CgroupLimits{MemoryMax: 128 << 20, PidsMax: 100})
	r := isolated(t, c, nil)
	u := NewUserWork(c, r)
	dir := t.TempDir()
	counter := func(name string) string { return filepath.Join(dir, name) }
	// Each writes a growing count to its file, as fast as it can.
	loop := func(name string) error {
		_, _, err := r.ForkExec("/bin/sh", []string{"sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > " + counter(name) + ".tmp; mv " + counter(name) + ".tmp " + counter(name) + "; done"}, &syscall.ProcAttr{})
		return err
	}
	read := func(name string) string {
		b, _ := os.ReadFile(counter(name))
		return string(b)
	}
	if err := loop("before"); err != nil {
		t.Fatal(err)
	}
	for read("before") == "" {
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := u.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	if !c.UserFrozen() {
		t.Fatal("Freeze returned, yet cgroup.events does not say frozen")
	}
	started := make(chan error, 1)
	go func() { started <- loop("during") }()
	at := read("before")
	time.Sleep(500 * time.Millisecond)
	if now := read("before"); now != at {
		t.Errorf("a frozen process ran: its count went from %s to %s", at, now)
	}
	select {
	case err := <-started:
		t.Errorf("a start while frozen returned before the thaw: %v", err)
	default:
	}
	if b := read("during"); b != "" {
		t.Errorf("a process started while frozen ran: it wrote %s", b)
	}
	if err := u.Thaw(); err != nil {
		t.Fatal(err)
	}
	if err := <-started; err != nil {
		t.Fatalf("the start held by the freeze: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for read("during") == "" || read("before") == at {
		if time.Now().After(deadline) {
			t.Fatalf("after the thaw: before %q (was %q), during %q", read("before"), at, read("during"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if c.UserFrozen() {
		t.Error("cgroup.events still says frozen after the thaw")
	}
}

// TestCgroupV2Leaves: each start in work is born in a leaf of its own,
// which goes once its processes are gone (at once, or at a later sweep
// when one left a daemon behind); and the CPU is shared between the
// leaves, not between tasks: one busy loop beside a command of twenty
// gets about half of the CPU, not a twenty-first.
func TestCgroupV2Leaves(t *testing.T) {
	c := layoutForTest(t, CgroupLimits{MemoryMax: 128 << 20, PidsMax: 200})
	if c.leaves == nil {
		t.Fatalf("no leaves: %s", c.LeavesOff)
	}
	work := filepath.Join(DefaultCgroupMount, testCgroupName, "user", "work")
	if got := readTrim(t, filepath.Join(work, "cgroup.subtree_control")); got != "cpu" {
		t.Errorf("work's subtree_control %q, want cpu", got)
	}
	if got := readTrim(t, filepath.Join(DefaultCgroupMount, testCgroupName, "user", "spare", "cpu.weight")); got != strconv.Itoa(spareCPUWeight) {
		t.Errorf("spare's cpu.weight %s", got)
	}
	r := isolated(t, c, nil)
	many, manyDone, err := r.ForkExec("/bin/sh", []string{"sh", "-c", "for i in $(seq 20); do (while :; do :; done) & done; wait"}, &syscall.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	one, oneDone, err := r.ForkExec("/bin/sh", []string{"sh", "-c", "while :; do :; done"}, &syscall.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	manyLeaf, oneLeaf := cgroupOf(t, many), cgroupOf(t, one)
	if manyLeaf == oneLeaf || !strings.HasPrefix(oneLeaf, "/"+testCgroupName+"/user/work/"+leafPrefix) {
		t.Fatalf("two starts in %q and %q, want two leaves of work", manyLeaf, oneLeaf)
	}
	usage := func(leaf string) int64 {
		return keyed(filepath.Join(DefaultCgroupMount, leaf, "cpu.stat"), "usage_usec")
	}
	m0, o0 := usage(manyLeaf), usage(oneLeaf)
	time.Sleep(3 * time.Second)
	m1, o1 := usage(manyLeaf), usage(oneLeaf)
	share := float64(o1-o0) / float64(m1-m0+o1-o0)
	t.Logf("one busy loop beside twenty: %.0f%% of their CPU", share*100)
	if share < 0.25 {
		t.Errorf("one busy loop beside a command of twenty got %.0f%% of the CPU: it is shared by task, not by command", share*100)
	}
	syscall.Kill(one, syscall.SIGKILL)
	<-oneDone
	c.leaves.removing.Wait() // the removal runs after the exit's news
	if _, err := os.Stat(filepath.Join(DefaultCgroupMount, oneLeaf)); !os.IsNotExist(err) {
		t.Errorf("the leaf of an ended command is still there: %v", err)
	}
	// The shell's loops outlive it: its leaf stays until they go.
	syscall.Kill(many, syscall.SIGKILL)
	<-manyDone
	c.leaves.removing.Wait()
	if _, err := os.Stat(filepath.Join(DefaultCgroupMount, manyLeaf)); err != nil {
		t.Errorf("the leaf still holding the loops is gone: %v", err)
	}
	write(filepath.Join(DefaultCgroupMount, manyLeaf, "cgroup.kill"), "1")
	for deadline := time.Now().Add(30 * time.Second); ; {
		time.Sleep(leafSweepEvery)
		// A later exit sweeps the pending leaves.
		_, done, err := r.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{})
		if err != nil {
			t.Fatal(err)
		}
		<-done
		c.leaves.removing.Wait()
		if _, err := os.Stat(filepath.Join(DefaultCgroupMount, manyLeaf)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the emptied leaf %s is never swept", manyLeaf)
		}
	}
	if n := c.leaves.count(); n != 0 {
		t.Errorf("%d leaves left", n)
	}
}

// TestCgroupV2FreezeSubtree: a cgroup user work made below its own is
// frozen with it, and the freeze says how many processes stopped; a
// cgroup the user froze itself is still frozen after the thaw, while the
// rest runs again.
func TestCgroupV2FreezeSubtree(t *testing.T) {
	c := layoutForTest(t, CgroupLimits{MemoryMax: 128 << 20, PidsMax: 100})
	r := isolated(t, c, nil)
	u := NewUserWork(c, r)
	dir := t.TempDir()
	counter := func(name string) string { return filepath.Join(dir, name) }
	read := func(name string) string {
		b, _ := os.ReadFile(counter(name))
		return string(b)
	}
	// Each loop moves into a cgroup made below its own leaf, as a user's
	// container runtime would, then counts.
	var subs []string
	loop := func(name string) string {
		t.Helper()
		pid, _, err := r.ForkExec("/bin/sh", []string{"sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > " + counter(name) + ".tmp; mv " + counter(name) + ".tmp " + counter(name) + "; done"}, &syscall.ProcAttr{})
		if err != nil {
			t.Fatal(err)
		}
		own, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			t.Fatal(err)
		}
		sub := filepath.Join(DefaultCgroupMount, strings.TrimPrefix(strings.TrimSpace(string(own)), "0::"), name)
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
		if err := write(filepath.Join(sub, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			t.Fatal(err)
		}
		for read(name) == "" {
			time.Sleep(10 * time.Millisecond)
		}
		return sub
	}
	t.Cleanup(func() {
		for _, sub := range subs {
			write(filepath.Join(sub, "cgroup.freeze"), "0")
			write(filepath.Join(sub, "cgroup.kill"), "1")
			for i := 0; i < 100 && os.Remove(sub) != nil; i++ {
				time.Sleep(10 * time.Millisecond)
			}
		}
	})
	loop("mine")
	theirs := loop("theirs")
	if err := write(filepath.Join(theirs, "cgroup.freeze"), "1"); err != nil {
		t.Fatal(err)
	}
	for !cgroupFrozen(theirs) {
		time.Sleep(time.Millisecond)
	}
	theirsAt := read("theirs")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := u.Freeze(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(d, "user work frozen: ") || !strings.HasSuffix(d, " processes stopped") {
		t.Errorf("the freeze says %q", d)
	}
	mineAt := read("mine")
	time.Sleep(300 * time.Millisecond)
	if now := read("mine"); now != mineAt {
		t.Errorf("a process in a cgroup below user work ran while frozen: %s to %s", mineAt, now)
	}
	if err := u.Thaw(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for read("mine") == mineAt {
		if time.Now().After(deadline) {
			t.Fatal("the process below user work did not run again after the thaw")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if !cgroupFrozen(theirs) || !selfFrozen(theirs) || read("theirs") != theirsAt {
		t.Errorf("the cgroup the user froze itself: frozen %v, its cgroup.freeze 1 %v, count %s (was %s): the thaw undid the user's own freeze",
			cgroupFrozen(theirs), selfFrozen(theirs), read("theirs"), theirsAt)
	}
}
