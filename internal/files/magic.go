package files

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Magic links are the /proc entries that lead to whatever a process holds
// (/proc/PID/fd/N, cwd, root, exe, map_files), not to the path they
// show. The agent's own are reachable as /proc/self/... from any thread
// of it, including one that borrowed another user's identity: through
// them an operation as nobody would reach a file the agent holds open
// for someone else, in a directory nobody may enter. So a path used as
// another user must not go through one.

var (
	errMagicLink = errors.New("the path goes through a /proc magic link (a process's fd, cwd, root or exe), which operations as another user may not follow")
	errAgentProc = errors.New("the path is in the agent's own /proc entries (for another user, /proc/self is the agent, not them)")
)

// noMagicLinks refuses p, for an operation as another user, when
// resolving it (or, for a path still to be created, its nearest existing
// ancestor) crosses a magic link. It resolves with openat2's
// RESOLVE_NO_MAGICLINKS; a kernel without openat2 (before 5.6) refuses
// the /proc paths that lead to magic links by their names instead.
func noMagicLinks(op, p string) error {
	for q := p; ; q = filepath.Dir(q) {
		fd, err := unix.Openat2(unix.AT_FDCWD, q, &unix.OpenHow{
			Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS,
		})
		switch {
		case err == nil:
			own := agentProc(fd)
			unix.Close(fd)
			if own {
				return newErr(op, p, ErrPermission, errAgentProc)
			}
			return nil
		case errors.Is(err, unix.ENOSYS):
			if magicName(p) {
				return newErr(op, p, ErrPermission, errMagicLink)
			}
			return nil
		case errors.Is(err, unix.ELOOP):
			// A magic link, unless the path loops without the flag too
			// (too many symlinks: the operation itself says so then).
			fd, err := unix.Openat2(unix.AT_FDCWD, q, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC})
			if err == nil {
				unix.Close(fd)
			}
			if errors.Is(err, unix.ELOOP) {
				return nil
			}
			return newErr(op, p, ErrPermission, errMagicLink)
		case errors.Is(err, unix.ENOENT) && q != "/":
			continue // not there yet: what leads to it must be clean
		}
		return nil // any other error is the operation's to report
	}
}

// agentProc reports whether the open O_PATH descriptor fd is the agent
// process's own /proc directory or below it: /proc/self and
// /proc/thread-self of a thread acting as another user are the agent's,
// so listing /proc/self/fd would name the files the agent holds open for
// others.
func agentProc(fd int) bool {
	where, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return false
	}
	rest, ok := strings.CutPrefix(where, "/proc/")
	if !ok {
		return false
	}
	pid, _, _ := strings.Cut(rest, "/")
	n, err := strconv.Atoi(pid)
	if err != nil {
		return false
	}
	if n == os.Getpid() {
		return true
	}
	// A thread of the agent: /proc/TID answers for its thread group.
	b, err := os.ReadFile("/proc/" + pid + "/status")
	return err == nil && strings.Contains(string(b), "\nTgid:\t"+strconv.Itoa(os.Getpid())+"\n")
}

// magicName reports whether the clean absolute path p names a magic link
// of /proc or something below one: /proc/{self,thread-self,PID}/ (and
// .../task/TID/) followed by fd, cwd, root, exe or map_files.
func magicName(p string) bool {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(parts) < 3 || parts[0] != "proc" || !process(parts[1]) {
		return false
	}
	rest := parts[2:]
	if len(rest) >= 3 && rest[0] == "task" && process(rest[1]) {
		rest = rest[2:]
	}
	switch rest[0] {
	case "fd", "cwd", "root", "exe", "map_files":
		return true
	}
	return false
}

func process(s string) bool {
	return s == "self" || s == "thread-self" || (s != "" && strings.Trim(s, "0123456789") == "")
}

// openNoMagic opens p as open(2) would with flags, but never through a
// magic link (openat2, RESOLVE_NO_MAGICLINKS): a path swapped for one
// between noMagicLinks's check and the open is refused too. A kernel
// without openat2 opens as before (noMagicLinks refused the names).
func openNoMagic(op, p string, flags int) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_NO_MAGICLINKS})
	switch {
	case errors.Is(err, unix.ENOSYS):
		return unix.Open(p, flags, 0)
	case errors.Is(err, unix.ELOOP):
		if err := noMagicLinks(op, p); err != nil {
			return -1, err
		}
	}
	return fd, err
}

// asFileError is err as the package reports it: an *Error as it is, a
// system call's error wrapped for op on p.
func asFileError(op, p string, err error) error {
	var fe *Error
	if errors.As(err, &fe) {
		return err
	}
	return newErr(op, p, nil, err)
}

// openFor opens p for u: for another user never through a magic link
// (openNoMagic), for the agent itself as open(2) does.
func (m *Manager) openFor(u User, op, p string, flags int) (int, error) {
	if u.UID == m.self.uid && u.GID == m.self.gid {
		return unix.Open(p, flags, 0)
	}
	return openNoMagic(op, p, flags)
}
