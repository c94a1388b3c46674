package files

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Move renames from to to, as rename(2) does: an existing file at to is
// replaced, an existing empty directory too, a non-empty one is
// ErrNotEmpty. Across filesystems the entry (a whole tree for a
// directory) is copied next to to, renamed into place, and only then is
// from removed: a failure leaves from as it was and nothing at to.
func (m *Manager) Move(userName, from, to string) error {
	return m.MoveWith(userName, from, to, MoveOptions{})
}

// MoveOptions say how MoveWith moves.
type MoveOptions struct {
	// Parents creates the missing parent directories of the target
	// (0o777 less the umask, owned by the user), once the source is
	// known to exist.
	Parents bool
	// Owner, when set, is given the parent directories Parents creates
	// (owned.go).
	Owner *User
}

// MoveWith is Move with options.
func (m *Manager) MoveWith(userName, from, to string, o MoveOptions) error {
	u, err := m.User(userName)
	if err != nil {
		return err
	}
	src, err := absFor(u, "move", from)
	if err != nil {
		return err
	}
	dst, err := absFor(u, "move", to)
	if err != nil {
		return err
	}
	for _, p := range []string{src, dst} {
		if err := m.clean(u, "move", p); err != nil {
			return err
		}
	}
	across := false
	noMagic, owner := m.noMagicFor(u, o.Owner), gift(o.Owner)
	err = m.as(u, func() error {
		from, err := openDir(filepath.Dir(src), noMagic)
		if err != nil {
			return newErr("move", src, nil, err)
		}
		defer from.close()
		var to dirFD
		if o.Parents {
			var st unix.Stat_t
			if err := unix.Fstatat(int(from), filepath.Base(src), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return newErr("move", src, nil, pathErr("lstat", src, err))
			}
			to, err = mkdirAll(filepath.Dir(dst), 0o777, owner, noMagic)
		} else {
			to, err = openDir(filepath.Dir(dst), noMagic)
		}
		if err != nil {
			return newErr("move", dst, nil, err)
		}
		defer to.close()
		// Both names relative to their directories' descriptors: a
		// symlink swapped into either path meanwhile moves nothing
		// elsewhere.
		err = pathErr("rename", src, unix.Renameat(int(from), filepath.Base(src), int(to), filepath.Base(dst)))
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EXDEV):
			across = true
			return nil
		}
		if _, serr := os.Lstat(src); serr != nil {
			return newErr("move", src, nil, serr)
		}
		return moveErr(src, dst, err)
	})
	if err != nil || !across {
		return err
	}
	tmp := tempName(dst)
	entry := m.journal.add(tmp, u)
	defer m.journal.done(entry)
	return m.as(u, func() error { return m.moveAcross(u, src, dst, tmp, noMagic) })
}

// moveErr reports a failed rename; rename(2) says EEXIST or ENOTEMPTY
// alike for a non-empty directory at the target.
func moveErr(src, dst string, err error) error {
	if errors.Is(err, syscall.EEXIST) {
		return newErr("move", src+" to "+dst, ErrNotEmpty, err)
	}
	return newErr("move", src+" to "+dst, nil, err)
}

// modeBits converts a FileMode to the bits chmod(2) takes.
func modeBits(m fs.FileMode) uint32 {
	b := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		b |= unix.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		b |= unix.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		b |= unix.S_ISVTX
	}
	return b
}
