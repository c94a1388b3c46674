package proc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// The process guard. A fork bomb's harm is not its CPU (a leaf's share,
// leaves.go) nor its tasks (pids.max) but a kernel lock every process
// takes: each fork, exec and exit takes, for every file it maps, that
// file's i_mmap_rwsem, and the shell and the C library are mapped by
// every process in the sandbox. With a thousand bomb shells forking and
// exiting, the waiters form a queue, each served only once it gets its
// turn on the CPU among the bomb's shells, and any other process's exec
// or exit (an `echo` through the agent: about ten mappings each way)
// joins that queue: 5 to 13 s each in the test VM, the kernel's stacks
// showing the echo in mmap_region and unlink_file_vma (docs/benchmarks.md,
// "The agent keeps its footing"). Capped at 512 tasks the bomb still
// queues (a fork beyond pids.max fails only after it copied the mappings)
// but the slowest exec took 5.7 s. So a command that grows past Max
// processes is a runaway: the guard kills it whole (cgroup.kill on its
// leaf), as the OOM killer would a memory hog, and its end says so.
// Processes, not tasks: threads share their process's mappings and take
// no such lock, so a JVM's or a browser's hundreds of threads are not
// counted.

// ProcessGuard kills a command with more than Max processes; Max 0 is off.
type ProcessGuard struct{ Max int }

// DefaultProcessGuard: far above what one command runs honestly (a
// parallel build on a sandbox's few CPUs, a server's workers, a browser's
// few dozen processes), below where the queue made an exec through the
// agent take its whole 10 s in the test VM.
var DefaultProcessGuard = ProcessGuard{Max: 512}

// MinProcessGuard is the smallest Max: below it, honest parallel work
// would be killed.
const MinProcessGuard = 64

// processGuardEvery is how often the guard reads the leaves' process
// lists (one small file per command).
const processGuardEvery = 250 * time.Millisecond

// ParseProcessGuard reads "off" or a number of processes.
func ParseProcessGuard(s string) (ProcessGuard, error) {
	if s == "off" {
		return ProcessGuard{}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < MinProcessGuard {
		return ProcessGuard{}, fmt.Errorf("must be off or a number of processes, at least %d, got %q", MinProcessGuard, s)
	}
	return ProcessGuard{Max: n}, nil
}

// String is the setting as ParseProcessGuard reads it.
func (g ProcessGuard) String() string {
	if g.Max == 0 {
		return "off"
	}
	return strconv.Itoa(g.Max)
}

type processGuard struct {
	c     *Cgroups
	g     ProcessGuard
	log   *zap.Logger
	done  chan struct{}
	ended chan struct{}
}

// GuardProcesses starts the process guard on the commands' leaves of c
// (nothing where isolation or the leaves are off, or g is off). Close
// stops it.
func (c *Cgroups) GuardProcesses(g ProcessGuard, log *zap.Logger) {
	if !c.On() || c.leaves == nil || g.Max == 0 {
		return
	}
	if log == nil {
		log = zap.NewNop()
	}
	p := &processGuard{c: c, g: g, log: log, done: make(chan struct{}), ended: make(chan struct{})}
	c.pguard = p
	go p.run()
}

func (p *processGuard) run() {
	defer close(p.ended)
	t := time.NewTicker(processGuardEvery)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-t.C:
			p.sweep()
		}
	}
}

func (p *processGuard) close() {
	close(p.done)
	<-p.ended
}

// sweep kills every leaf holding more than Max processes.
func (p *processGuard) sweep() {
	l := p.c.leaves
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), leafPrefix) {
			continue
		}
		// The leaves have no pids controller of their own (only cpu is
		// on below work), so no task count: their process lists, a few
		// bytes each but a runaway's.
		dir := filepath.Join(l.dir, e.Name())
		n := countProcs(dir)
		if n <= p.g.Max {
			continue
		}
		msg := fmt.Sprintf("killed by the agent's process guard: the command had %d processes, more than %d (a fork bomb?)", n, p.g.Max)
		l.markKilled(e.Name(), msg)
		if err := killCgroup(dir); err != nil {
			l.markKilled(e.Name(), "") // not killed: its end must not say so
			p.log.Warn("the process guard could not kill a runaway command", zap.String("cgroup", dir), zap.Int("processes", n), zap.Error(err))
			continue
		}
		p.c.runawayKills.Add(1)
		p.log.Warn("killed a runaway command", zap.String("cgroup", dir), zap.Int("processes", n), zap.Int("max", p.g.Max))
	}
}

// countProcs counts the processes (thread group leaders) in cgroup dir.
func countProcs(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("\n"))
}

// killCgroup kills every process in cgroup dir, and what they fork
// meanwhile: cgroup.kill (Linux 5.14) does it in one step; before it, the
// processes listed are killed until none is left.
func killCgroup(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err == nil {
		return write(filepath.Join(dir, "cgroup.kill"), "1")
	}
	for range 100 {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return err
		}
		alive := 0
		for _, s := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(s); err == nil && syscall.Kill(pid, syscall.SIGKILL) != syscall.ESRCH {
				alive++
			}
		}
		if alive == 0 {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("%s still holds processes after 100 rounds of SIGKILL", dir)
}
