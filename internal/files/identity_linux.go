package files

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"go.uber.org/zap"
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
// agent's own user. fn runs on a goroutine of its own locked to its
// thread, which switches to u and back; the package comment says why.
// If the switch back ever failed, the goroutine ends still locked and the
// runtime retires the thread, so no other goroutine runs with a borrowed
// identity.
func (m *Manager) as(u User, fn func() error) error {
	if u.UID == m.self.uid && u.GID == m.self.gid {
		return fn()
	}
	id := identity{uid: u.UID, gid: u.GID, groups: u.Groups}
	groups := !sameGroups(u, m.self.groups)
	done := make(chan taskResult, 1)
	go func() {
		runtime.LockOSThread()
		var r taskResult
		defer func() {
			if m.restore(groups) {
				runtime.UnlockOSThread()
			}
			done <- r
		}()
		prev, err := setFS(id, groups)
		if err == nil && prev != m.self.uid {
			// A thread of the pool had another identity: not for fn.
			err = fmt.Errorf("the thread was acting as uid %d", prev)
		}
		if err != nil {
			r.err, r.switchFailed = err, true
			return
		}
		defer func() { r.panicked = recover() }()
		r.err = fn()
	}()
	r := <-done
	if r.panicked != nil {
		panic(r.panicked)
	}
	if r.switchFailed {
		return newErr("switch to user", u.Name, ErrPermission,
			fmt.Errorf("the agent (uid %d) cannot act as uid %d: %w", m.self.uid, u.UID, r.err))
	}
	return r.err
}

// taskResult is how an operation run as a user ended.
type taskResult struct {
	err          error
	panicked     any
	switchFailed bool
}

// restore gives the calling thread the agent's identity back, trying
// three times (the kernel may fail to allocate the credentials); false if
// it could not, and the thread must then never run anything else.
func (m *Manager) restore(groups bool) bool {
	var err error
	for range 3 {
		if _, err = m.restoreFS(m.self, groups); err == nil {
			return true
		}
	}
	m.log.Error("a thread could not get the agent's identity back and is retired", zap.Error(err))
	return false
}

// sameGroups reports whether a thread with the supplementary groups own
// is checked against exactly the groups u's files are, so that
// switching to u needs no setgroups. The kernel checks a file's group
// against the fsgid before the supplementary groups (in_group_p), so u's
// primary group, which its account's groups hold too, need not be among
// them. Most users (nobody, a user with no other group) then need none,
// and the switch there and back saves two of its six credential changes,
// about 4 µs of a stat's round trip here.
func sameGroups(u User, own []uint32) bool {
	checked := func(list []uint32, g uint32) bool { return g == u.GID || slices.Contains(list, g) }
	for _, g := range u.Groups {
		if !checked(own, g) {
			return false
		}
	}
	for _, g := range own {
		if !checked(u.Groups, g) {
			return false
		}
	}
	return true
}

// setFS gives the calling thread the identity, with its supplementary
// groups only when groups is true (else the thread keeps its own), and
// answers the thread's fsuid before the change. The raw system calls
// change this thread only (the libc and Go wrappers change every thread of
// the process). Moving fsuid away from 0 drops the filesystem capabilities
// (CAP_DAC_OVERRIDE, CAP_CHOWN, CAP_FOWNER...) from the thread, and moving
// it back to 0 restores them, so the kernel checks exactly what it would
// check for a process of that user.
func setFS(id identity, groups bool) (prevUID uint32, err error) {
	if groups {
		var list unsafe.Pointer
		if len(id.groups) > 0 {
			list = unsafe.Pointer(&id.groups[0])
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(id.groups)), uintptr(list), 0); e != 0 {
			return 0, fmt.Errorf("setgroups: %w", e)
		}
	}
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(id.gid), 0, 0)
	prev, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, uintptr(id.uid), 0, 0)
	// Neither call reports failure; an invalid id (-1) changes nothing
	// and answers the current one.
	const query = uintptr(^uint32(0))
	fsgid, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, query, 0, 0)
	fsuid, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, query, 0, 0)
	if uint32(fsuid) != id.uid || uint32(fsgid) != id.gid {
		return uint32(prev), fmt.Errorf("setfsuid/setfsgid: now %d:%d, wanted %d:%d", fsuid, fsgid, id.uid, id.gid)
	}
	return uint32(prev), nil
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
