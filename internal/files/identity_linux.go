package files

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// identity is a filesystem identity: what the kernel checks file access
// against and gives to the files a thread creates.
type identity struct {
	uid, gid uint32
	groups   []uint32
}

// ownIdentity is the agent's own identity, which every borrowed thread
// gets back.
func ownIdentity() (identity, error) {
	gs, err := unix.Getgroups()
	if err != nil {
		return identity{}, err
	}
	id := identity{uid: uint32(unix.Geteuid()), gid: uint32(unix.Getegid())}
	for _, g := range gs {
		id.groups = append(id.groups, uint32(g))
	}
	return id, nil
}

// as runs fn with u's filesystem identity, or directly when u is the
// agent's own user. See the package comment for why threads with an fsuid,
// fsgid and groups of their own, and why kept per user.
func (m *Manager) as(u User, fn func() error) error {
	if u.UID == m.self.uid && u.GID == m.self.gid {
		return fn()
	}
	t := &task{fn: fn, done: make(chan taskResult, 1)}
	m.crews.crew(identity{uid: u.UID, gid: u.GID, groups: u.Groups}).do(m, t)
	r := <-t.done
	if r.panicked != nil {
		panic(r.panicked)
	}
	if r.err != nil {
		if _, isOurs := r.err.(*Error); !isOurs && r.switchFailed {
			return newErr("switch to user", u.Name, ErrPermission,
				fmt.Errorf("the agent (uid %d) cannot act as uid %d: %w", m.self.uid, u.UID, r.err))
		}
	}
	return r.err
}

// Worker threads: how many one identity may have, and how long one
// waits for work before it gives its thread back.
const (
	maxCrew  = 16
	crewIdle = 10 * time.Second
)

// crews are the worker threads of each identity in use.
type crews struct {
	mu sync.Mutex
	m  map[string]*crew
}

// crew is the worker threads that have one identity.
type crew struct {
	id      identity
	ops     chan *task // unbuffered: a send succeeds only to an idle worker
	mu      sync.Mutex
	workers int
}

type task struct {
	fn   func() error
	done chan taskResult
}

type taskResult struct {
	err          error
	panicked     any
	switchFailed bool
}

func (cs *crews) crew(id identity) *crew {
	key := make([]byte, 0, 16+4*len(id.groups))
	key = binary.LittleEndian.AppendUint32(key, id.uid)
	key = binary.LittleEndian.AppendUint32(key, id.gid)
	for _, g := range id.groups {
		key = binary.LittleEndian.AppendUint32(key, g)
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.m == nil {
		cs.m = map[string]*crew{}
	}
	c := cs.m[string(key)]
	if c == nil {
		c = &crew{id: id, ops: make(chan *task)}
		cs.m[string(key)] = c
	}
	return c
}

// do hands t to an idle worker, or to a new one, or waits for one when
// the crew is full.
func (c *crew) do(m *Manager, t *task) {
	select {
	case c.ops <- t:
		return
	default:
	}
	c.mu.Lock()
	if c.workers < maxCrew {
		c.workers++
		c.mu.Unlock()
		go c.work(m, t)
		return
	}
	c.mu.Unlock()
	c.ops <- t
}

// work runs tasks on a thread that has the crew's identity until it has
// been idle for crewIdle or the manager closes. When the thread gets the
// agent's identity back, it returns to the runtime's pool; if that ever
// failed, the goroutine ends still locked and the runtime retires the
// thread, so no other goroutine runs with a borrowed identity.
func (c *crew) work(m *Manager, first *task) {
	runtime.LockOSThread()
	defer func() {
		c.mu.Lock()
		c.workers--
		c.mu.Unlock()
		if setFS(m.self) == nil {
			runtime.UnlockOSThread()
		}
	}()
	if err := setFS(c.id); err != nil {
		first.done <- taskResult{err: err, switchFailed: true}
		return
	}
	first.run()
	idle := time.NewTimer(crewIdle)
	defer idle.Stop()
	for {
		select {
		case t := <-c.ops:
			t.run()
			idle.Reset(crewIdle)
		case <-idle.C:
			return
		case <-m.closing:
			return
		}
	}
}

func (t *task) run() {
	var r taskResult
	defer func() {
		r.panicked = recover()
		t.done <- r
	}()
	r.err = t.fn()
}

// setFS gives the calling thread the identity. The raw system calls
// change this thread only (the libc and Go wrappers change every thread of
// the process). Moving fsuid away from 0 drops the filesystem capabilities
// (CAP_DAC_OVERRIDE, CAP_CHOWN, CAP_FOWNER...) from the thread, and moving
// it back to 0 restores them, so the kernel checks exactly what it would
// check for a process of that user.
func setFS(id identity) error {
	var groups unsafe.Pointer
	if len(id.groups) > 0 {
		groups = unsafe.Pointer(&id.groups[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(id.groups)), uintptr(groups), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(id.gid), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(id.uid), 0, 0)
	// Neither call reports failure; an invalid id (-1) changes nothing
	// and answers the current one.
	const query = uintptr(^uint32(0))
	fsgid, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, query, 0, 0)
	fsuid, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, query, 0, 0)
	if uint32(fsuid) != id.uid || uint32(fsgid) != id.gid {
		return fmt.Errorf("setfsuid/setfsgid: now %d:%d, wanted %d:%d", fsuid, fsgid, id.uid, id.gid)
	}
	return nil
}

// processUmask reads the agent's umask without changing it (umask(2)
// would, for a moment, for every thread).
func processUmask() os.FileMode {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0o022
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Umask:"); ok {
			if n, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
				return os.FileMode(n)
			}
		}
	}
	return 0o022
}
