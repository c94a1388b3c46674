package files

import (
	"errors"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// A move between filesystems: the entry (a whole tree for a directory) is
// copied next to its target under a temporary name, renamed into place,
// and only then is the source removed, so a failure leaves the source as
// it was and nothing at the target. Every step is relative to a directory
// descriptor (dirfd.go), in the source tree as in the copy: a symlink
// swapped into either meanwhile is copied as a symlink, never followed.

// moveAcross moves src to dst through the temporary name tmp; it runs
// as the user.
func (m *Manager) moveAcross(u User, src, dst, tmp string, noMagic bool) error {
	from, err := openDir(filepath.Dir(src), noMagic)
	if err != nil {
		return newErr("move", src, nil, err)
	}
	defer from.close()
	to, err := openDir(filepath.Dir(dst), noMagic)
	if err != nil {
		return newErr("move", dst, nil, err)
	}
	defer to.close()
	c := copier{root: u.UID == 0}
	tmpName := filepath.Base(tmp)
	if err := c.copyAt(from, filepath.Base(src), to, tmpName); err != nil {
		removeAllAt(to, tmpName)
		return newErr("move", src+" to "+dst, nil, err)
	}
	if err := unix.Renameat(int(to), tmpName, int(to), filepath.Base(dst)); err != nil {
		removeAllAt(to, tmpName)
		return moveErr(src, dst, err)
	}
	if err := removeAllAt(from, filepath.Base(src)); err != nil {
		return newErr("move", src, nil, pathErr("remove", src, err))
	}
	return nil
}

// copier copies trees keeping modes, modification times, metadata and
// symlinks, and the owners when root copies. Devices, FIFOs and sockets
// cannot be copied.
type copier struct{ root bool }

// copyAt copies the entry name of src to the new entry target of dst.
func (c copier) copyAt(src dirFD, name string, dst dirFD, target string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(int(src), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		link, err := readlinkAt(src, name)
		if err != nil {
			return err
		}
		if err := unix.Symlinkat(link, int(dst), target); err != nil {
			return err
		}
		if c.root {
			return unix.Fchownat(int(dst), target, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW)
		}
		return nil
	case unix.S_IFREG:
		return c.copyFileAt(src, name, dst, target, &st)
	case unix.S_IFDIR:
		return c.copyDirAt(src, name, dst, target, &st)
	}
	return newErr("move", name, ErrUnsupported, errSpecialFile)
}

// copyFileAt copies a regular file, then its attributes.
func (c copier) copyFileAt(src dirFD, name string, dst dirFD, target string, st *unix.Stat_t) error {
	ifd, err := unix.Openat(int(src), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	in := os.NewFile(uintptr(ifd), name)
	defer in.Close()
	ofd, err := unix.Openat(int(dst), target, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	out := os.NewFile(uintptr(ofd), target)
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil {
		return err
	}
	if err := c.attrs(ifd, ofd, st); err != nil {
		return err
	}
	return out.Sync()
}

// copyDirAt copies a directory's entries, then its attributes (last: a
// read-only directory must still take its entries, and creating them
// would change its time).
func (c copier) copyDirAt(src dirFD, name string, dst dirFD, target string, st *unix.Stat_t) error {
	ifd, err := unix.Openat(int(src), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	in := os.NewFile(uintptr(ifd), name)
	defer in.Close()
	if err := unix.Mkdirat(int(dst), target, 0o700); err != nil {
		return err
	}
	ofd, err := unix.Openat(int(dst), target, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	out := os.NewFile(uintptr(ofd), target)
	defer out.Close()
	names, err := in.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := c.copyAt(dirFD(ifd), n, dirFD(ofd), n); err != nil {
			return err
		}
	}
	return c.attrs(ifd, ofd, st)
}

// attrs gives the copy out the owner (as root), metadata, mode and
// modification time of in, whose stat is st.
func (c copier) attrs(in, out int, st *unix.Stat_t) error {
	if c.root {
		// Before the mode: a chown clears setuid and setgid.
		if err := unix.Fchown(out, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	for k, v := range readMetadataFD(in) {
		if err := unix.Fsetxattr(out, metadataPrefix+k, []byte(v), 0); err != nil {
			return xattrErr("move", "", err)
		}
	}
	if err := unix.Fchmod(out, st.Mode&0o7777); err != nil {
		return err
	}
	times := []unix.Timespec{st.Mtim, st.Mtim}
	return unix.UtimesNanoAt(out, "", times, unix.AT_EMPTY_PATH)
}

func readlinkAt(d dirFD, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(int(d), name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// removeAllAt removes the entry name of d and everything below it,
// relative to descriptors all the way down; a missing entry is fine.
func removeAllAt(d dirFD, name string) error {
	err := unix.Unlinkat(int(d), name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	fd, err := unix.Openat(int(d), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	dir := os.NewFile(uintptr(fd), name)
	names, err := dir.Readdirnames(-1)
	if err == nil {
		for _, n := range names {
			if err = removeAllAt(dirFD(fd), n); err != nil {
				break
			}
		}
	}
	dir.Close()
	if err != nil {
		return err
	}
	return unix.Unlinkat(int(d), name, unix.AT_REMOVEDIR)
}
