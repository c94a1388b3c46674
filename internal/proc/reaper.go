package proc

import (
	"errors"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Reaper is the only caller of wait4 in the agent.
//
// The agent is a child subreaper, so every orphaned descendant becomes its
// child; something must reap those or they stay zombies forever. But a
// wait4(-1) loop would steal the exit status of children that others wait
// for (exec.Cmd.Wait returns ECHILD). So nobody but the Reaper waits:
// whoever starts a process does it through Start, which registers the pid
// before the reap loop can see it exit, and receives the status on a channel.
// Statuses of pids nobody registered (orphans) are discarded.
type Reaper struct {
	// mu is held for reading while a process is forked and registered and
	// for writing while reaping, so an exit can never be reaped before its
	// waiter is registered.
	mu      sync.RWMutex
	wmu     sync.Mutex
	waiters map[int]chan Status
	pidfds  map[*os.File]struct{} // children's pidfds being watched
	sigs    chan os.Signal
	stop    chan struct{}
	done    chan struct{}
	reaped  uint64 // orphans reaped, for tests and metrics
	// oom gives children an ordinary OOM score while the agent keeps its
	// shield (oom.go); nil when the agent has none, or cannot raise its
	// own again after a fork: then unshield makes each child's score 0
	// after its fork.
	oom      *oomShield
	unshield bool
	// iso is where children are born and how OOM victims are told
	// apart (Isolate); nil: anywhere, not told.
	iso atomic.Pointer[isolation]
	// held, while user work is frozen, is a channel closed at the thaw:
	// starts wait for it (UserWork).
	held atomic.Pointer[chan struct{}]
}

// isolation is what Isolate set.
type isolation struct {
	// work, if not -1, is the cgroup children are born in, spare the one
	// they are born in when work is full, hooks the hooks' (cgroup.go).
	work, spare, hooks int
	// leaves, if not nil, makes each child a leaf of work of its own
	// to be born in (leaves.go).
	leaves *leaves
	// stall, if not nil, says when work is stalled on memory: starts
	// then go to spare (sparememory.go).
	stall *stallGauge
	// spared, if not nil, counts the starts the spare took.
	spared *atomic.Int64
	// ooms tells the OOM killer's victims apart (oomkill.go); nil: not
	// known.
	ooms *OOMKills
}

// isolation is what Isolate set, never nil.
func (r *Reaper) isolation() *isolation {
	if iso := r.iso.Load(); iso != nil {
		return iso
	}
	return &isolation{work: -1, spare: -1, hooks: -1}
}

// Status is how a process ended.
type Status struct {
	Pid    int
	Wait   unix.WaitStatus
	Rusage unix.Rusage
	// OOMKilled: the kernel's OOM killer sent the SIGKILL.
	OOMKilled bool
	// KilledBy says why the agent's process guard killed the process
	// (procguard.go), if it did.
	KilledBy string
}

// ExitCode returns the exit code, or -1 if the process was killed by a signal.
func (s Status) ExitCode() int {
	if s.Wait.Exited() {
		return s.Wait.ExitStatus()
	}
	return -1
}

// NewReaper makes the agent a child subreaper and starts the reap loop.
// Close stops it. Only one Reaper may run in a process.
func NewReaper() (*Reaper, error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, err
	}
	r := &Reaper{
		waiters: make(map[int]chan Status),
		pidfds:  make(map[*os.File]struct{}),
		sigs:    make(chan os.Signal, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	r.oom = newOOMShield()
	r.unshield = r.oom == nil && ownOOMScoreAdj() < 0
	signal.Notify(r.sigs, syscall.SIGCHLD)
	go r.loop()
	return r, nil
}

// Isolate makes every later child of ForkExec start in the cgroup c says
// (cgroup.go: user/work, or user/spare once work is full), and tells the
// OOM killer's victims apart with ooms (either may be nil). Call it
// before the first fork.
func (r *Reaper) Isolate(c *Cgroups, ooms *OOMKills) {
	iso := &isolation{ooms: ooms}
	iso.work, iso.spare = c.StartFDs()
	iso.hooks = c.HooksFD()
	if c.On() {
		iso.leaves, iso.stall, iso.spared = c.leaves, c.stall, &c.spareStarts
	}
	r.iso.Store(iso)
}

// Start runs fork (which must create exactly one child and return its pid)
// and returns a channel that receives the child's status once.
func (r *Reaper) Start(fork func() (int, error)) (int, <-chan Status, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var pid int
	var err error
	if r.oom != nil {
		pid, err = r.oom.fork(fork)
	} else {
		pid, err = fork()
	}
	if err != nil {
		return 0, nil, err
	}
	if r.unshield {
		unshieldChild(pid)
	}
	ch := make(chan Status, 1)
	r.wmu.Lock()
	r.waiters[pid] = ch
	r.wmu.Unlock()
	return pid, ch, nil
}

// ForkExec is Start for syscall.ForkExec. Where the kernel gives the child
// a pidfd, its exit is also watched through it, in the poller: the status
// then arrives without the detour SIGCHLD takes through the signal
// machinery (a handler, the signal goroutine, the reap loop), which costs
// every short command several wake-ups.
func (r *Reaper) ForkExec(path string, argv []string, attr *syscall.ProcAttr) (int, <-chan Status, error) {
	iso := r.isolation()
	if iso.spare >= 0 && iso.stall.stalled() {
		// Work is at its memory limit, stalled (a runaway reclaiming
		// before its OOM kill): born there, this start would wait with
		// it. The spare has memory work cannot take. A spare full of
		// tasks sends it back to work: slow is better than refused.
		pid, ch, err := r.forkExecIn(iso.spare, nil, -1, nil, path, argv, attr)
		if err == nil && iso.spared != nil {
			iso.spared.Add(1)
		}
		if !errors.Is(err, syscall.EAGAIN) {
			return pid, ch, err
		}
	}
	return r.forkExecIn(iso.work, iso.leaves, iso.spare, iso.spared, path, argv, attr)
}

// ForkExecHook is ForkExec for a lifecycle hook: born in the hooks'
// cgroup, which a fork bomb in user work cannot fill.
func (r *Reaper) ForkExecHook(path string, argv []string, attr *syscall.ProcAttr) (int, <-chan Status, error) {
	return r.forkExecIn(r.isolation().hooks, nil, -1, nil, path, argv, attr)
}

// forkExecIn is ForkExec into the cgroup of directory descriptor cg (-1:
// the agent's own), or a new leaf of it if lv is not nil, then spare (-1:
// none) if cg is at its pids.max, counted in spared if given.
func (r *Reaper) forkExecIn(cg int, lv *leaves, spare int, spared *atomic.Int64, path string, argv []string, attr *syscall.ProcAttr) (int, <-chan Status, error) {
	leaf := ""
	if lv != nil {
		name, fd, err := lv.make()
		if err != nil {
			return 0, nil, err
		}
		defer unix.Close(fd)
		leaf, cg = name, fd
	}
	a := *attr
	var sys syscall.SysProcAttr
	if attr.Sys != nil {
		sys = *attr.Sys
	}
	pidfd := -1
	sys.PidFD = &pidfd
	if cg >= 0 {
		// Born in its cgroup (clone3, CLONE_INTO_CGROUP): never for an
		// instant outside it.
		sys.UseCgroupFD, sys.CgroupFD = true, cg
	}
	a.Sys = &sys
	if held := r.held.Load(); held != nil && cg >= 0 {
		// A child born frozen would hold this start, and the reaper's
		// lock, until the thaw: wait for the thaw first instead.
		<-*held
	}
	pid, ch, err := r.Start(func() (int, error) {
		pid, err := syscall.ForkExec(path, argv, &a)
		if errors.Is(err, syscall.EAGAIN) && spare >= 0 {
			// The user's work is at its pids.max (a fork bomb?): this
			// start, likely the user's way out, takes the spare.
			if leaf != "" {
				lv.drop(leaf)
				leaf = ""
			}
			sys.CgroupFD = spare
			pid, err = syscall.ForkExec(path, argv, &a)
			if err == nil && spared != nil {
				spared.Add(1)
			}
		}
		if leaf != "" {
			if err != nil {
				lv.drop(leaf)
			} else {
				// Before the reaper can see it exit: Start holds mu.
				lv.started(pid, leaf)
			}
		}
		return pid, err
	})
	switch {
	case err == nil && pidfd >= 0:
		r.watch(pid, pidfd)
	case pidfd >= 0:
		unix.Close(pidfd)
	}
	return pid, ch, err
}

// watch reaps pid as soon as its pidfd says it exited. The reap loop may
// get there first; either way its waiter gets the status once.
func (r *Reaper) watch(pid, pidfd int) {
	if unix.SetNonblock(pidfd, true) != nil {
		unix.Close(pidfd)
		return
	}
	f := os.NewFile(uintptr(pidfd), "pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return
	}
	r.wmu.Lock()
	select {
	case <-r.stop:
		r.wmu.Unlock()
		f.Close()
		return
	default:
	}
	r.pidfds[f] = struct{}{}
	r.wmu.Unlock()
	go func() {
		// A pidfd turns readable when its process exits. The poller's
		// news of that can predate this wait (a short command exits
		// before it starts), so each turn asks the kernel itself.
		err := rc.Read(func(fd uintptr) bool {
			p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(p, 0)
			for err == unix.EINTR {
				n, err = unix.Poll(p, 0)
			}
			return err != nil || n > 0
		})
		r.wmu.Lock()
		delete(r.pidfds, f)
		r.wmu.Unlock()
		f.Close()
		if err == nil {
			r.reap(pid)
		}
	}()
}

// reap collects pid if it exited and someone waits for it.
func (r *Reaper) reap(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wmu.Lock()
	_, registered := r.waiters[pid]
	r.wmu.Unlock()
	if !registered {
		return // the reap loop had it
	}
	var st Status
	got, err := unix.Wait4(pid, &st.Wait, unix.WNOHANG, &st.Rusage)
	for errors.Is(err, unix.EINTR) {
		got, err = unix.Wait4(pid, &st.Wait, unix.WNOHANG, &st.Rusage)
	}
	if err == nil && got == pid {
		st.Pid = pid
		r.deliver(st)
	}
}

// Kill signals a process the reaper started, or its process group, but
// the process alone only while it has not been reaped: after wait4 its pid
// is free and may belong to someone else. A group's number stays reserved
// only while a member lives: after the leader was reaped, a process that
// now holds the number as its pid is a stranger (a new group or session
// leader has pid = pgid), and the group is treated as gone. While Kill
// runs nothing is reaped, so members found alive stay ours.
func (r *Reaper) Kill(pid int, sig syscall.Signal, group bool) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	r.wmu.Lock()
	_, live := r.waiters[pid]
	r.wmu.Unlock()
	if group {
		if !live && syscall.Kill(pid, 0) != syscall.ESRCH {
			return syscall.ESRCH
		}
		return syscall.Kill(-pid, sig)
	}
	if !live {
		return syscall.ESRCH
	}
	return syscall.Kill(pid, sig)
}

// Orphans returns how many unregistered processes were reaped.
func (r *Reaper) Orphans() uint64 {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	return r.reaped
}

// Close stops the reap loop. Processes still running are not waited for.
func (r *Reaper) Close() {
	select {
	case <-r.stop:
		return
	default:
	}
	signal.Stop(r.sigs)
	r.wmu.Lock()
	close(r.stop)
	for f := range r.pidfds {
		f.Close() // ends its watch
	}
	r.wmu.Unlock()
	<-r.done
}

func (r *Reaper) loop() {
	defer close(r.done)
	for {
		select {
		case <-r.stop:
			return
		case <-r.sigs:
			r.reapAll()
		}
	}
}

// reapAll collects every exited child; SIGCHLD signals coalesce, so one
// signal may stand for many exits.
func (r *Reaper) reapAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var st Status
		pid, err := unix.Wait4(-1, &st.Wait, unix.WNOHANG, &st.Rusage)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		st.Pid = pid
		r.deliver(st)
	}
}

// deliver hands a reaped status to its waiter, or counts an orphan.
// Callers hold mu for writing.
func (r *Reaper) deliver(st Status) {
	r.wmu.Lock()
	ch, ok := r.waiters[st.Pid]
	delete(r.waiters, st.Pid)
	if !ok {
		r.reaped++
	}
	r.wmu.Unlock()
	if !ok {
		return
	}
	st.KilledBy = r.isolation().leaves.ended(st.Pid)
	if ooms := r.isolation().ooms; ooms != nil && st.Wait.Signaled() && st.Wait.Signal() == syscall.SIGKILL {
		// Not on the reaping path: the kernel's line may take a moment.
		go func() {
			st.OOMKilled = ooms.Killed(st.Pid, oomLineWait)
			ch <- st
		}()
		return
	}
	ch <- st
}
