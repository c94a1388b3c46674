package freezetest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// freezer pauses and resumes an agent's whole process tree, as a VM pause
// would: nothing in it runs, its sockets and pipes keep their data.
type freezer interface {
	// prepare is called before the agent starts.
	prepare(cmd *exec.Cmd) error
	// started is called with the agent's pid once it runs, exited once
	// it was reaped (its pid may then name another process).
	started(pid int)
	exited()
	freeze() error
	thaw() error
	// killAll kills every process of the tree at once: a power cut.
	killAll() error
	// close kills what is left and releases the freezer.
	close()
	kind() string
}

// Freezer kinds, also the values of RAYITO_FREEZER.
const (
	freezerCgroup = "cgroup"
	freezerSignal = "signal"
)

// settleWait bounds how long the kernel takes to report a tree frozen,
// thawed or gone; generous for a loaded machine.
const settleWait = 30 * time.Second

var (
	cgroupProbe   sync.Once
	cgroupBase    string // where the test cgroups go; "" if unusable
	cgroupBaseErr error
	cgroupSeq     atomic.Int64
)

// newFreezer returns the freezer the environment asks for, else the cgroup
// one when it works here, else the signal one.
func newFreezer(t testing.TB) freezer {
	want := os.Getenv("RAYITO_FREEZER")
	if want == freezerSignal {
		return &signalFreezer{}
	}
	f, err := newCgroupFreezer()
	if err == nil {
		return f
	}
	if want == freezerCgroup {
		t.Fatalf("RAYITO_FREEZER=cgroup: %v", err)
	}
	return &signalFreezer{}
}

// freezerOf returns a freezer of the given kind, or newFreezer's choice.
func freezerOf(t testing.TB, kind string) freezer {
	switch kind {
	case freezerSignal:
		return &signalFreezer{}
	case freezerCgroup:
		f, err := newCgroupFreezer()
		if err != nil {
			t.Fatalf("cgroup freezer: %v", err)
		}
		return f
	}
	return newFreezer(t)
}

// availableFreezers lists the kinds that work here.
func availableFreezers() []string {
	kinds := []string{freezerSignal}
	if f, err := newCgroupFreezer(); err == nil {
		f.close()
		kinds = append(kinds, freezerCgroup)
	}
	return kinds
}

// cgroupFreezer puts the agent in a cgroup v2 of its own.
type cgroupFreezer struct {
	dir string
	fd  *os.File
}

func newCgroupFreezer() (*cgroupFreezer, error) {
	cgroupProbe.Do(func() { cgroupBase, cgroupBaseErr = findCgroup2() })
	if cgroupBaseErr != nil {
		return nil, cgroupBaseErr
	}
	dir := filepath.Join(cgroupBase, fmt.Sprintf("rayito-freezetest-%d-%d", os.Getpid(), cgroupSeq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.freeze")); err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("no cgroup v2 freezer: %w", err)
	}
	fd, err := os.Open(dir)
	if err != nil {
		os.Remove(dir)
		return nil, err
	}
	return &cgroupFreezer{dir: dir, fd: fd}, nil
}

// findCgroup2 returns this process's cgroup in the cgroup2 hierarchy, if
// one is mounted writable.
func findCgroup2() (string, error) {
	mounts, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer mounts.Close()
	mnt := ""
	sc := bufio.NewScanner(mounts)
	for sc.Scan() {
		// id parent dev root mountpoint options ... - fstype source superopts
		f := strings.Fields(sc.Text())
		for i, x := range f {
			if x == "-" && i+1 < len(f) && f[i+1] == "cgroup2" && len(f) > 5 && strings.HasPrefix(f[5], "rw") {
				mnt = f[4]
			}
		}
	}
	if mnt == "" {
		return "", errors.New("no writable cgroup2 mount")
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(self), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join(mnt, rest), nil
		}
	}
	return "", errors.New("no cgroup2 entry in /proc/self/cgroup")
}

func (f *cgroupFreezer) kind() string { return freezerCgroup }

func (f *cgroupFreezer) prepare(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = int(f.fd.Fd())
	return nil
}

func (f *cgroupFreezer) started(int) {}
func (f *cgroupFreezer) exited()     {}

func (f *cgroupFreezer) freeze() error {
	if err := os.WriteFile(filepath.Join(f.dir, "cgroup.freeze"), []byte("1"), 0); err != nil {
		return err
	}
	return f.waitEvent("frozen", "1")
}

func (f *cgroupFreezer) thaw() error {
	if err := os.WriteFile(filepath.Join(f.dir, "cgroup.freeze"), []byte("0"), 0); err != nil {
		return err
	}
	return f.waitEvent("frozen", "0")
}

func (f *cgroupFreezer) killAll() error {
	if err := os.WriteFile(filepath.Join(f.dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		return err
	}
	return f.waitEvent("populated", "0")
}

// waitEvent waits until cgroup.events shows key with value.
func (f *cgroupFreezer) waitEvent(key, value string) error {
	deadline := time.Now().Add(settleWait)
	for {
		b, err := os.ReadFile(filepath.Join(f.dir, "cgroup.events"))
		if err != nil {
			return err
		}
		if strings.Contains("\n"+string(b), "\n"+key+" "+value+"\n") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: no %q %s after %v: %s", f.dir, key, value, settleWait, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f *cgroupFreezer) close() {
	f.killAll()
	f.fd.Close()
	os.Remove(f.dir)
}

// signalFreezer stops the tree with SIGSTOP. Parents see their children
// stop only if they wait with WUNTRACED, which the agent does not.
type signalFreezer struct {
	root    atomic.Int64 // the agent's pid; 0 once reaped
	stopped []int        // in the order they were stopped: parents first
}

func (f *signalFreezer) kind() string            { return freezerSignal }
func (f *signalFreezer) prepare(*exec.Cmd) error { return nil }
func (f *signalFreezer) started(pid int)         { f.root.Store(int64(pid)) }
func (f *signalFreezer) exited()                 { f.root.Store(0) }
func (f *signalFreezer) close()                  { f.killAll() }

func (f *signalFreezer) freeze() error {
	f.stopped = nil
	seen := map[int]bool{}
	// A process may fork between a walk and its stop: walk again until a
	// walk finds nothing new.
	for {
		order := descendants(int(f.root.Load()))
		var fresh []int
		for _, pid := range order {
			if !seen[pid] {
				seen[pid] = true
				fresh = append(fresh, pid)
			}
		}
		if len(fresh) == 0 {
			return nil
		}
		for _, pid := range fresh {
			if syscall.Kill(pid, syscall.SIGSTOP) == nil {
				f.stopped = append(f.stopped, pid)
			}
		}
		for _, pid := range fresh {
			if err := waitState(pid, func(s byte) bool { return s == 'T' || s == 't' }); err != nil {
				return err
			}
		}
	}
}

func (f *signalFreezer) thaw() error {
	for i := len(f.stopped) - 1; i >= 0; i-- {
		syscall.Kill(f.stopped[i], syscall.SIGCONT)
	}
	f.stopped = nil
	return nil
}

func (f *signalFreezer) killAll() error {
	if f.root.Load() == 0 {
		return nil
	}
	if err := f.freeze(); err != nil {
		return err
	}
	for _, pid := range f.stopped {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	f.stopped = nil
	return nil
}

// descendants walks /proc for root and every process below it, parents
// before children.
func descendants(root int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := procStat(pid); ok {
			children[ppid] = append(children[ppid], pid)
		}
	}
	in := map[int]bool{}
	var order []int
	if _, _, ok := procStat(root); root == 0 || !ok {
		return nil
	}
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if in[pid] {
			continue
		}
		in[pid] = true
		order = append(order, pid)
		queue = append(queue, children[pid]...)
	}
	return order
}

// procStat reads a process's parent and state from /proc/<pid>/stat.
func procStat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0][0], err == nil
}

// waitState waits until pid's state satisfies ok, or pid is gone.
func waitState(pid int, ok func(byte) bool) error {
	deadline := time.Now().Add(settleWait)
	for {
		_, s, exists := procStat(pid)
		if !exists || ok(s) || s == 'Z' || s == 'X' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d still in state %c after %v", pid, s, settleWait)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
