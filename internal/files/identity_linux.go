package files

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
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

// Bounds of the operations as another user.
const (
	// identityThreads is how many run at once. Each holds an OS thread
	// for as long as its file system calls take (never a network write:
	// WriteTar reads as the user and writes as the agent), so a few
	// suffice, and no number of clients can pile up threads until Go's
	// limit kills the agent.
	identityThreads = 32
)

// identityWait is how long an operation waits for one of them before it
// is refused with limit: long enough for a burst, short enough that a
// disk that hangs is reported, not queued behind (a variable for tests).
var identityWait = 10 * time.Second

// identityBound is how long an operation's caller waits for it: file
// system calls take milliseconds, and nothing that waits on another
// party (a FIFO's writer, a client) ever runs as a user, so only a hung
// file system reaches it (a variable for tests).
var identityBound = time.Minute

// as runs fn with u's identity, or directly when u is the
// agent's own user. fn runs on a goroutine of its own locked to its
// thread, which switches to u and back; the package comment says why.
// If the switch back ever failed, the goroutine ends still locked and the
// runtime retires the thread, so no other goroutine runs with a borrowed
// identity. At most identityThreads run at once; fn must only make file
// system calls, never wait on a client.
func (m *Manager) as(u User, fn func() error) error {
	if u.UID == m.self.uid && u.GID == m.self.gid {
		return fn()
	}
	select {
	case m.identities <- struct{}{}:
	default:
		t := time.NewTimer(identityWait)
		select {
		case m.identities <- struct{}{}:
			t.Stop()
		case <-t.C:
			return newErr("act as", u.Name, ErrBusy, fmt.Errorf("%d operations as other users have been running for %v", identityThreads, identityWait))
		}
	}
	id := identity{uid: u.UID, gid: u.GID, groups: u.Groups}
	groups := !sameGroups(u, m.self.groups)
	done := make(chan taskResult, 1)
	go func() {
		// The slot is the thread's, held for as long as fn runs, even
		// past the caller's wait.
		defer func() { <-m.identities }()
		runtime.LockOSThread()
		var r taskResult
		defer func() {
			if m.restore(groups) {
				runtime.UnlockOSThread()
			}
			done <- r
		}()
		if err := setIDs(id, groups); err != nil {
			r.err, r.switchFailed = err, true
			return
		}
		defer func() { r.panicked = recover() }()
		r.err = fn()
	}()
	wait := time.NewTimer(identityBound)
	defer wait.Stop()
	var r taskResult
	select {
	case r = <-done:
	case <-wait.C:
		// A file system that does not answer (a hung mount): the caller
		// is told; the thread keeps its slot until the call returns.
		return newErr("act as", u.Name, ErrBusy, fmt.Errorf("the file system has not answered for %v", identityBound))
	}
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
		if err = m.restoreIDs(m.self, groups); err == nil {
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

// setIDs gives the calling thread the identity: its effective and
// filesystem uid and gid, and its supplementary groups only when groups is
// true (else the thread keeps its own). The raw system calls change this
// thread only (the libc and Go wrappers change every thread of the
// process); the real and saved ids stay the agent's, which is what lets
// the thread switch back. An effective uid away from 0 clears the
// thread's effective capabilities (CAP_DAC_OVERRIDE, CAP_CHOWN,
// CAP_SYS_RESOURCE...), so the kernel checks exactly what it would check
// for a process of that user; they come back from the permitted set with
// the effective uid 0. Unlike setfsuid and setfsgid, which report no
// failure and needed a second call each to check that they took,
// setresuid and setresgid answer an error: two system calls a switch
// instead of four.
func setIDs(id identity, groups bool) error {
	if groups {
		if err := setGroups(id.groups); err != nil {
			return err
		}
	}
	// The gid first: with the uid changed, the thread lacks CAP_SETGID.
	const keep = uintptr(^uint32(0)) // -1: leave that id as it is
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keep, uintptr(id.gid), keep); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(id.uid), keep); e != 0 {
		return fmt.Errorf("setresuid: %w", e)
	}
	return nil
}

// restoreIDs gives the calling thread the agent's own identity back, the
// uid first (which brings back the capabilities the gid and groups
// need); groups as for setIDs.
func restoreIDs(own identity, groups bool) error {
	const keep = uintptr(^uint32(0))
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(own.uid), keep); e != 0 {
		return fmt.Errorf("setresuid: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keep, uintptr(own.gid), keep); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	if groups {
		return setGroups(own.groups)
	}
	return nil
}

// setGroups sets the calling thread's supplementary groups.
func setGroups(groups []uint32) error {
	var list unsafe.Pointer
	if len(groups) > 0 {
		list = unsafe.Pointer(&groups[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(list), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
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
