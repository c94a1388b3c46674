package files

import (
	"errors"
	"io"
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
	return m.as(u, func() error { return m.moveAcross(u, src, dst, tmp) })
}

// moveErr reports a failed rename; rename(2) says EEXIST or ENOTEMPTY
// alike for a non-empty directory at the target.
func moveErr(src, dst string, err error) error {
	if errors.Is(err, syscall.EEXIST) {
		return newErr("move", src+" to "+dst, ErrNotEmpty, err)
	}
	return newErr("move", src+" to "+dst, nil, err)
}

// moveAcross is Move between filesystems, through tmp; it runs as the
// user.
func (m *Manager) moveAcross(u User, src, dst, tmp string) error {
	if err := m.copyTree(u, src, tmp); err != nil {
		os.RemoveAll(tmp)
		return newErr("move", src+" to "+dst, nil, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.RemoveAll(tmp)
		return moveErr(src, dst, err)
	}
	if err := os.RemoveAll(src); err != nil {
		return newErr("move", src, nil, err)
	}
	return nil
}

// copyTree copies src to dst (which must not exist) keeping modes,
// modification times and symlinks; as root, owners too. Devices, FIFOs
// and sockets cannot be copied. Directories get their attributes last,
// deepest first: a read-only directory must still take its entries, and
// creating them would change its time.
func (m *Manager) copyTree(u User, src, dst string) error {
	type dir struct {
		src, path string
		st        fs.FileInfo
	}
	var dirs []dir
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		st, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case st.IsDir():
			dirs = append(dirs, dir{p, target, st})
			return os.Mkdir(target, 0o700)
		case st.Mode().IsRegular():
			if err := copyFile(p, target); err != nil {
				return err
			}
		case st.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		default:
			return newErr("move", p, ErrUnsupported, errSpecialFile)
		}
		return m.copyAttrs(u, p, target, st)
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := m.copyAttrs(u, dirs[i].src, dirs[i].path, dirs[i].st); err != nil {
			return err
		}
	}
	return nil
}

// copyAttrs gives target the owner (as root), mode, times and metadata of
// src, whose lstat is st.
func (m *Manager) copyAttrs(u User, src, target string, st fs.FileInfo) error {
	if sys := statT(st); u.UID == 0 && sys != nil {
		if err := os.Lchown(target, int(sys.Uid), int(sys.Gid)); err != nil {
			return err
		}
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		return nil
	}
	for k, v := range readMetadata(src) {
		if err := unix.Lsetxattr(target, metadataPrefix+k, []byte(v), 0); err != nil {
			return xattrErr("move", target, err)
		}
	}
	if err := unix.Fchmodat(unix.AT_FDCWD, target, modeBits(st.Mode()), 0); err != nil {
		return err
	}
	return os.Chtimes(target, st.ModTime(), st.ModTime())
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
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
