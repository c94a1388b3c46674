package proc

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Each process the agent starts in user/work is born in a cgroup of its
// own, a leaf (work/p-N), and whatever it forks stays there. The CPU
// controller is on below work, so the kernel shares user work's CPU
// between the commands the user started, not between their tasks: a fork
// bomb of four thousand runnable shells is one share, as is the memory
// hog beside it and the `echo ok` started after both. Shared per task,
// the echo waited over a minute for its turn to exec (and the agent's
// fork, which waits for the child's exec, with it), and the hog never
// got the CPU to reach its memory limit. Limits (pids, memory) stay on
// user and work, which count the leaves' tasks too.

// leafPrefix names the leaves: p-N.
const leafPrefix = "p-"

// leafSweepEvery bounds how often leaves whose first process ended but
// that still held others (a daemon it left) are tried again.
const leafSweepEvery = time.Second

// leaves makes and removes the leaf cgroups of work.
type leaves struct {
	dir string // work's directory
	fd  int    // work's directory descriptor, for mkdirat and unlinkat
	seq atomic.Uint64

	// removing counts the removals under way (ended), which close waits for.
	removing sync.WaitGroup

	mu      sync.Mutex
	byPid   map[int]string      // the leaf of each running process started in one
	pending map[string]struct{} // leaves whose process ended, still populated
	killed  map[string]string   // why the process guard killed a leaf (procguard.go)
	swept   time.Time
}

// newLeaves turns work's CPU controller on for leaves, first moving any
// process found in work itself (started by an agent before this one)
// into a leaf of its own: a cgroup that hands controllers down may hold
// no process.
func newLeaves(dir string) (*leaves, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	l := &leaves{dir: dir, fd: fd, byPid: map[int]string{}, pending: map[string]struct{}{}, killed: map[string]string{}}
	if b, err := os.ReadFile(dir + "/cgroup.procs"); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		name := leafPrefix + "adopted"
		if err := unix.Mkdirat(fd, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			l.close()
			return nil, fmt.Errorf("making %s/%s: %w", dir, name, err)
		}
		for _, pid := range strings.Fields(string(b)) {
			// One that exited meanwhile is no matter.
			write(dir+"/"+name+"/cgroup.procs", pid)
		}
		l.pending[name] = struct{}{}
	}
	if err := enable(dir, "cpu"); err != nil {
		l.close()
		return nil, fmt.Errorf("enabling cpu in %s: %w", dir, err)
	}
	// Leaves an agent before this one left behind: empty ones go now,
	// the rest once empty.
	if names, err := readDirNames(dir); err == nil {
		for _, n := range names {
			if strings.HasPrefix(n, leafPrefix) {
				l.pending[n] = struct{}{}
			}
		}
	}
	l.sweepLocked()
	return l, nil
}

func (l *leaves) close() {
	if l == nil {
		return
	}
	l.removing.Wait()
	if l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
}

// make creates a new leaf and returns its name and an open descriptor of
// it for CLONE_INTO_CGROUP (the caller closes it).
func (l *leaves) make() (string, int, error) {
	name := leafPrefix + strconv.FormatUint(l.seq.Add(1), 10)
	if err := unix.Mkdirat(l.fd, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return "", -1, fmt.Errorf("making %s/%s: %w", l.dir, name, err)
	}
	fd, err := unix.Openat(l.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Unlinkat(l.fd, name, unix.AT_REMOVEDIR)
		return "", -1, fmt.Errorf("opening %s/%s: %w", l.dir, name, err)
	}
	return name, fd, nil
}

// started records that pid was born in leaf name.
func (l *leaves) started(pid int, name string) {
	l.mu.Lock()
	l.byPid[pid] = name
	l.mu.Unlock()
}

// drop removes a leaf no process was born in (the fork failed).
func (l *leaves) drop(name string) { unix.Unlinkat(l.fd, name, unix.AT_REMOVEDIR) }

// markKilled records why the process guard killed leaf name, for the
// end of the process started in it; "" forgets it.
func (l *leaves) markKilled(name, why string) {
	l.mu.Lock()
	if why == "" {
		delete(l.killed, name)
	} else {
		l.killed[name] = why
	}
	l.mu.Unlock()
}

// ended removes the leaf of pid, which exited, if it is empty; one still
// holding what pid left running is tried again later. The removal runs
// on a goroutine of its own: the rmdir (a cgroup's teardown) is not on
// the path of the exit's news to its waiter, nor under the reaper's lock.
// It returns why the process guard killed the leaf, if it did.
func (l *leaves) ended(pid int) (killedBy string) {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	name, ok := l.byPid[pid]
	delete(l.byPid, pid)
	killedBy = l.killed[name]
	delete(l.killed, name)
	l.mu.Unlock()
	if !ok {
		return ""
	}
	l.removing.Add(1)
	go func() {
		defer l.removing.Done()
		l.mu.Lock()
		defer l.mu.Unlock()
		if unix.Unlinkat(l.fd, name, unix.AT_REMOVEDIR) != nil {
			l.pending[name] = struct{}{}
		}
		if len(l.pending) > 0 && time.Since(l.swept) >= leafSweepEvery {
			l.sweepLocked()
		}
	}()
	return killedBy
}

// sweepLocked removes the pending leaves that are empty now.
func (l *leaves) sweepLocked() {
	l.swept = time.Now()
	for name := range l.pending {
		err := unix.Unlinkat(l.fd, name, unix.AT_REMOVEDIR)
		if err == nil || errors.Is(err, unix.ENOENT) {
			delete(l.pending, name)
		}
	}
}

// count is how many leaves there are, running and pending, once the
// removals under way are done (tests).
func (l *leaves) count() int {
	l.removing.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byPid) + len(l.pending)
}

func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}
