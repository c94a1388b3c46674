package proc

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/stream"
)

func TestUserLimitsFor(t *testing.T) {
	l, err := UserLimitsFor(CgroupLimits{}, MachineMemory{Total: 512 << 20})
	if err != nil || l.MemoryMax != 448<<20 || l.MemoryHigh != l.MemoryMax || l.PidsMax != DefaultUserPids || l.CPUWeight != 100 || l.IOWeight != 100 {
		t.Fatalf("defaults for 512 MiB without swap: %+v, %v", l, err)
	}
	if l, _ := UserLimitsFor(CgroupLimits{}, MachineMemory{Total: 512 << 20, Swap: 1 << 30}); l.MemoryHigh != (448<<20)/10*9 {
		t.Fatalf("with swap, throttling starts at 90%%: %+v", l)
	}
	if l, _ := UserLimitsFor(CgroupLimits{}, MachineMemory{Total: 8 << 30}); l.MemoryMax != 7<<30 {
		t.Fatalf("defaults for 8 GiB: a reserve of an eighth, got max %d MiB", l.MemoryMax>>20)
	}
	// What the kernel and init held at the agent's start is reserved too.
	if l, _ := UserLimitsFor(CgroupLimits{}, MachineMemory{Total: 1 << 30, InUse: 140 << 20}); l.MemoryMax != (1024-128-140)<<20 {
		t.Fatalf("1 GiB with 140 MiB in use: max %d MiB, want %d", l.MemoryMax>>20, 1024-128-140)
	}
	if l, _ := UserLimitsFor(CgroupLimits{}, MachineMemory{Total: 256 << 20, InUse: 200 << 20}); l.MemoryMax != MinUserMemory {
		t.Fatalf("a machine with little left: max %d MiB, want the floor", l.MemoryMax>>20)
	}
	for _, tc := range []struct {
		l    CgroupLimits
		flag string
	}{
		{CgroupLimits{MemoryMax: 1 << 20}, "--user-memory-max must be at least"},
		{CgroupLimits{MemoryMax: 1 << 40}, "--user-memory-max must be at most the machine's memory"},
		{CgroupLimits{MemoryMax: 256 << 20, MemoryHigh: 300 << 20}, "--user-memory-high"},
		{CgroupLimits{PidsMax: 3}, "--user-pids-max"},
		{CgroupLimits{CPUWeight: 20000}, "--user-cpu-weight"},
		{CgroupLimits{IOWeight: -1}, "--user-io-weight"},
	} {
		if _, err := UserLimitsFor(tc.l, MachineMemory{Total: 512 << 20}); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%+v: %v, want an error naming %s", tc.l, err, tc.flag)
		}
	}
}

// Where there is no usable cgroup v2 (this kind of machine has its
// controllers on v1), isolation is off and says why; nothing fails.
func TestCgroupsOffSayWhy(t *testing.T) {
	l, _ := UserLimitsFor(CgroupLimits{}, MachineMemory{Total: 512 << 20})
	for mount, why := range map[string]string{
		t.TempDir(): "no cgroup v2 mounted",
	} {
		c := SetupCgroups(mount, l)
		if c.On() || !strings.Contains(c.Off, why) || func() bool { w, s := c.StartFDs(); return w != -1 || s != -1 }() {
			t.Errorf("%s: %+v, want off because %q", mount, c, why)
		}
		if iso := c.Isolation(); iso.State != "off" || iso.Reason == "" || iso.CgroupStats != nil {
			t.Errorf("%s: isolation %+v", mount, iso)
		}
	}
}

// The kernel's log names each OOM victim; a SIGKILL death is the OOM
// killer's only if the log named that pid, within the wait.
func TestOOMKillsFromTheLog(t *testing.T) {
	o := newOOMKills()
	o.note([]byte("3,1234,5678,-;Memory cgroup out of memory: Killed process 4242 (python3) total-vm:1000kB, anon-rss:900kB, file-rss:0kB"))
	o.note([]byte("6,1235,5679,-;some other line"))
	if !o.Killed(4242, 0) || o.Killed(4242, 0) {
		t.Fatal("a named victim is reported once")
	}
	if o.Killed(77, 10*time.Millisecond) {
		t.Fatal("a pid the log never named is reported killed")
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		o.note([]byte("3,1236,5680,-;Out of memory: Killed process 88 (cc1)"))
	}()
	if !o.Killed(88, 5*time.Second) {
		t.Fatal("a line that comes during the wait is seen")
	}
	if o.Count() != 2 {
		t.Fatalf("count %d", o.Count())
	}
	var st Status
	st.Wait = unix.WaitStatus(syscall.SIGKILL)
	st.OOMKilled = true
	if e := ExitEnd(st); e.Reason != stream.ReasonOOMKilled || e.Signal != "SIGKILL" || e.ExitCode != nil {
		t.Fatalf("an OOM victim's end: %+v", e)
	}
	st.OOMKilled = false
	if e := ExitEnd(st); e.Reason != stream.ReasonExit || e.Signal != "SIGKILL" {
		t.Fatalf("a plain SIGKILL's end: %+v", e)
	}
}

// cpu.pressure and memory.pressure lines are read for their avg10.
func TestPressure(t *testing.T) {
	psi := filepath.Join(t.TempDir(), "cpu.pressure")
	os.WriteFile(psi, []byte("some avg10=80.50 avg60=10.00 avg300=2.00 total=1\nfull avg10=61.25 avg60=5.00 avg300=1.00 total=1\n"), 0o644)
	if got := pressure(psi, "full"); got != 61.25 {
		t.Fatalf("full avg10 %v", got)
	}
	if got := pressure(psi, "some"); got != 80.5 {
		t.Fatalf("some avg10 %v", got)
	}
	if got := pressure(psi+".none", "some"); got != 0 {
		t.Fatalf("a missing file: %v", got)
	}
}

func TestParseMemoryGuard(t *testing.T) {
	if g, err := ParseMemoryGuard("40%/30s"); err != nil || g != DefaultMemoryGuard || g.String() != "40%/30s" {
		t.Fatalf("40%%/30s: %+v %v", g, err)
	}
	if g, err := ParseMemoryGuard("off"); err != nil || !g.Off || g.String() != "off" {
		t.Fatalf("off: %+v %v", g, err)
	}
	for _, bad := range []string{"", "40", "40%", "0.4/30s", "5%/30s", "140%/30s", "40%/1s", "40%/1h", "40%/soon"} {
		if _, err := ParseMemoryGuard(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// stallFile plays a cgroup's memory.pressure: fully stalled share of the
// time since it started, rewritten whole every 50 ms until the test ends.
func stallFile(t *testing.T, dir string, share float64) {
	file := filepath.Join(dir, "memory.pressure")
	start := time.Now()
	write := func() {
		us := int64(float64(time.Since(start).Microseconds()) * share)
		tmp := file + ".tmp"
		os.WriteFile(tmp, []byte("some avg10=0.00 avg60=0.00 avg300=0.00 total="+strconv.FormatInt(us, 10)+
			"\nfull avg10=0.00 avg60=0.00 avg300=0.00 total="+strconv.FormatInt(us, 10)+"\n"), 0o644)
		os.Rename(tmp, file)
	}
	write()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				write()
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// The guard's sampling, on a played memory.pressure and a real process:
// a stall of half the time for the whole span kills the process with the
// highest oom_score, and its end says oom_killed; a light stall is left
// alone (the guard goes back to waiting).
func TestMemoryGuardSampling(t *testing.T) {
	r := testReaper(t)
	start := func() (int, <-chan Status) {
		pid, done, err := r.ForkExec("/bin/sleep", []string{"sleep", "60"}, &syscall.ProcAttr{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
		return pid, done
	}
	small, _ := start()
	big, bigDone := start()
	os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", big), []byte("500"), 0)
	guard := func(share float64) (*memoryGuard, *Cgroups) {
		dir := t.TempDir()
		os.Mkdir(filepath.Join(dir, "work"), 0o755)
		os.Mkdir(filepath.Join(dir, "spare"), 0o755)
		os.WriteFile(filepath.Join(dir, "work", "cgroup.procs"), []byte(fmt.Sprintf("%d\n", small)), 0o644)
		os.WriteFile(filepath.Join(dir, "spare", "cgroup.procs"), []byte(fmt.Sprintf("%d\n", big)), 0o644)
		stallFile(t, dir, share)
		c := &Cgroups{user: dir}
		ooms := newOOMKills()
		r.Isolate(nil, ooms)
		t.Cleanup(func() { r.Isolate(nil, nil) })
		return &memoryGuard{c: c, ooms: ooms, log: zap.NewNop(), g: MemoryGuard{Share: 0.4, For: 3 * time.Second}, done: make(chan struct{})}, c
	}

	light, c := guard(0.1)
	if !light.sample() || c.guardKills.Load() != 0 {
		t.Fatal("a light stall killed")
	}
	select {
	case st := <-bigDone:
		t.Fatalf("the process ended under a light stall: %v", st.Wait)
	default:
	}

	heavy, c := guard(0.5)
	if !heavy.sample() || c.guardKills.Load() != 1 {
		t.Fatalf("a heavy stall: %d kills", c.guardKills.Load())
	}
	select {
	case st := <-bigDone:
		if e := ExitEnd(st); e.Reason != stream.ReasonOOMKilled {
			t.Fatalf("the victim ended %+v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the process with the highest oom_score was not killed")
	}
	if err := syscall.Kill(small, 0); err != nil {
		t.Fatalf("the other process was killed too: %v", err)
	}

	// A kill by the kernel (memory.events' oom_kill moves) starts the
	// span again: the stalls before it were its victim's.
	big, _ = start()
	busy, c := guard(0.5)
	events := filepath.Join(c.user, "memory.events")
	stop := make(chan struct{})
	go func() {
		for n := 1; ; n++ {
			os.WriteFile(events, []byte("oom "+strconv.Itoa(n)+"\noom_kill "+strconv.Itoa(n)+"\n"), 0o644)
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
		}
	}()
	time.AfterFunc(2*busy.g.For, func() { close(busy.done) })
	if busy.sample() || c.guardKills.Load() != 0 {
		t.Fatalf("killed though the kernel kept killing: %d kills", c.guardKills.Load())
	}
	close(stop)
}
