package files

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
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
	done := make(chan taskResult, 1)
	go func() {
		runtime.LockOSThread()
		var r taskResult
		defer func() {
			if setFS(m.self) == nil {
				runtime.UnlockOSThread()
			}
			done <- r
		}()
		if r.err = setFS(id); r.err != nil {
			r.switchFailed = true
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
