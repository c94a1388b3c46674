package files

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Directories by descriptor. An operation that creates, gives away or
// renames an entry does it relative to a descriptor of the entry's
// directory (mkdirat, openat, fchownat, renameat, unlinkat), never by
// resolving the name again: between a check and the act another program
// of the sandbox could swap a directory of the path for a symlink (to
// root's directories, or to a /proc magic link), and a name resolved
// twice would then lead elsewhere the second time. A descriptor stays the
// directory it was opened as, even if it is renamed meanwhile.

// dirFD is an open directory (O_PATH: it grants nothing, it names).
type dirFD int

func (d dirFD) close() { unix.Close(int(d)) }

// openDir opens the directory at p. Symlinks along p are followed, as any
// path is, but never a magic link when noMagic (an operation as another
// user, or for one: magic.go).
func openDir(p string, noMagic bool) (dirFD, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC}
	if noMagic {
		how.Resolve = unix.RESOLVE_NO_MAGICLINKS
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &how)
	if errors.Is(err, unix.ENOSYS) {
		// Before Linux 5.6: noMagicLinks refused the names already.
		fd, err = unix.Open(p, int(how.Flags), 0)
	}
	if errors.Is(err, unix.ELOOP) && noMagic {
		if cerr := noMagicLinks("open", p); cerr != nil {
			return -1, cerr
		}
	}
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return dirFD(fd), nil
}

// childDir opens the directory name in d, following a symlink there like
// openDir does.
func (d dirFD) childDir(name string, noMagic bool) (dirFD, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC}
	if noMagic {
		how.Resolve = unix.RESOLVE_NO_MAGICLINKS
	}
	fd, err := unix.Openat2(int(d), name, &how)
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Openat(int(d), name, int(how.Flags), 0)
	}
	if err != nil {
		return -1, err
	}
	return dirFD(fd), nil
}

// mkdirAt creates the directory name in d and gives it to owner (nil:
// left to whoever created it). The new directory is given through a
// descriptor of it opened without following a symlink, so a swap of the
// name between the two steps makes it fail rather than give away what the
// name was swapped for.
func (d dirFD) mkdirAt(name string, perm fs.FileMode, owner *User) error {
	if err := unix.Mkdirat(int(d), name, uint32(perm.Perm())); err != nil {
		return err
	}
	if owner == nil {
		return nil
	}
	if afterMkdirAt != nil {
		afterMkdirAt(d, name)
	}
	fd, err := unix.Openat(int(d), name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fchownat(fd, "", int(owner.UID), int(owner.GID), unix.AT_EMPTY_PATH)
}

// afterMkdirAt, when set (tests only), runs between mkdirAt's two steps:
// where a program racing the agent would swap the new name.
var afterMkdirAt func(d dirFD, name string)

// mkdirAll opens the directory at dir, creating the missing ones on the
// way (perm less the umask) as mkdir -p does, each given to owner (nil:
// left to whoever created it). Every step is relative to the directory
// the last one opened.
func mkdirAll(dir string, perm fs.FileMode, owner *User, noMagic bool) (dirFD, error) {
	dir = filepath.Clean(dir)
	d, err := openDir("/", noMagic)
	if err != nil {
		return -1, err
	}
	for _, name := range strings.Split(strings.TrimPrefix(dir, "/"), "/") {
		if name == "" {
			continue
		}
		next, err := d.childDir(name, noMagic)
		if errors.Is(err, unix.ENOENT) {
			if err = d.mkdirAt(name, perm, owner); err == nil || errors.Is(err, unix.EEXIST) {
				// Made meanwhile by someone else: not ours to give.
				next, err = d.childDir(name, noMagic)
			}
		}
		d.close()
		if err != nil {
			if errors.Is(err, unix.ELOOP) && noMagic {
				if cerr := noMagicLinks("mkdir", dir); cerr != nil {
					return -1, cerr
				}
			}
			return -1, &fs.PathError{Op: "mkdir", Path: dir, Err: err}
		}
		d = next
	}
	return d, nil
}
