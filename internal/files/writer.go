package files

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// WriteOptions say how Create writes a file.
type WriteOptions struct {
	// Mode is the file's permission bits (with setuid, setgid, sticky;
	// at most 0o7777), applied exactly. 0 keeps those of the file being
	// replaced, and gives a new file 0o666 less the umask.
	Mode uint32
	// Parents creates missing parent directories (0o777 less the umask).
	Parents bool
	// Append starts from the file's current content. The content is
	// copied, so the file is still replaced atomically.
	Append bool
	// Exclusive fails with ErrExists when the path exists, at Create or,
	// if it appeared meanwhile, at Commit.
	Exclusive bool
	// Metadata is stored with the new content (see Info.Metadata); the
	// replaced file's goes with it. Keys are at most 246 bytes, values
	// 64 KiB. A filesystem without user extended attributes refuses it
	// with ErrUnsupported.
	Metadata map[string]string
	// NoHash leaves Committed.SHA256 empty, for callers that report no
	// checksum: hashing is up to two fifths of an upload's CPU.
	NoHash bool
	// Owner, when set, is given what the write creates: the missing
	// parent directories and the file when it is new (a replaced file
	// keeps its owner). For a write with the agent's rights on a user's
	// behalf (owned.go).
	Owner *User
}

// Committed is a file a Writer put in place.
type Committed struct {
	Path    string // the file written (a symlink's target when path was one)
	Size    int64
	SHA256  string // hex, of the whole content; empty with NoHash
	Created bool   // there was no file before
}

// Writer writes a file atomically: into a temporary file in the same
// directory, renamed over the target by Commit. A reader of the path sees
// the old content or the new, never a part. Abort, or any failure,
// removes the temporary file. The directory is held open from Create on
// and every step is relative to it (dirfd.go): a symlink swapped into the
// path meanwhile leads nothing astray, and a directory renamed during the
// write still gets its file, or loses its temporary one. A Writer is used
// by one goroutine.
type Writer struct {
	m       *Manager
	u       User
	path    string
	dir     dirFD  // the target's directory; -1 until prepared
	name    string // the target's name in dir
	tmp     string // the temporary file's path (for the journal)
	tmpName string // its name in dir
	f       *os.File
	hash    hash.Hash // nil with NoHash
	size    int64
	opts    WriteOptions
	mode    uint32
	owner   *[2]int // uid and gid kept when root replaces another's file
	existed bool
	entry   string // journal entry of tmp
	err     error  // the failure that ended the writer
	closed  bool
}

// Create starts writing the file at path as the user. See WriteOptions.
// Errors: ErrIsDir or ErrNotRegular (something else is at path),
// ErrExists (Exclusive), ErrNotFound (no parent directory without
// Parents), ErrNotDir (a file is in the way of a parent), ErrPermission,
// ErrUnsupported (a virtual filesystem such as /proc or /sys, whose files
// cannot be replaced; Metadata where extended attributes are not kept),
// ErrInvalid (a mode or metadata out of bounds), ErrNoSpace.
func (m *Manager) Create(userName, path string, o WriteOptions) (*Writer, error) {
	u, p, err := m.resolve("write", userName, path)
	if err != nil {
		return nil, err
	}
	if o.Mode > 0o7777 {
		return nil, newErr("write", p, ErrInvalid, errMode)
	}
	if err := checkMetadata(p, o.Metadata); err != nil {
		return nil, err
	}
	w := &Writer{m: m, u: u, path: p, opts: o, dir: -1}
	if !o.NoHash {
		w.hash = sha256.New()
	}
	if err := m.as(u, w.prepare); err != nil {
		if w.dir >= 0 {
			w.dir.close()
		}
		return nil, err
	}
	w.tmp = tempName(w.path)
	w.tmpName = filepath.Base(w.tmp)
	w.entry = m.journal.add(w.tmp, u)
	if err := m.as(u, w.createTemp); err != nil {
		m.journal.done(w.entry)
		w.dir.close()
		return nil, err
	}
	return w, nil
}

// noMagic says whether the writer's paths may not go through a /proc
// magic link: it works for someone other than the agent.
func (w *Writer) noMagic() bool {
	return w.opts.Owner != nil || w.u.UID != w.m.self.uid || w.u.GID != w.m.self.gid
}

// prepare opens the target's directory and checks the target; it runs
// as the user.
func (w *Writer) prepare() error {
	if st, err := os.Lstat(w.path); err == nil && st.Mode()&fs.ModeSymlink != 0 {
		// Write through the link like a shell's > does; a dangling link
		// is replaced.
		if real, rerr := filepath.EvalSymlinks(w.path); rerr == nil {
			w.path = real
		}
	}
	dir := filepath.Dir(w.path)
	w.name = filepath.Base(w.path)
	var err error
	if w.opts.Parents {
		w.dir, err = mkdirAll(dir, 0o777, w.opts.Owner, w.noMagic())
	} else {
		w.dir, err = openDir(dir, w.noMagic())
	}
	if err != nil {
		return newErr("write", w.path, nil, err)
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(w.dir), &sfs); err == nil && virtualFS(sfs.Type) {
		return newErr("write", w.path, ErrUnsupported, errVirtual)
	}
	st, err := w.lstat()
	if err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		// A dangling link (or one that appeared meanwhile): the rename
		// replaces the link itself.
		st, err = nil, fs.ErrNotExist
	}
	switch {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return newErr("write", w.path, ErrIsDir, nil)
	case err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG:
		return newErr("write", w.path, ErrNotRegular, nil)
	case err == nil && w.opts.Exclusive:
		return newErr("write", w.path, ErrExists, nil)
	case err == nil:
		w.existed = true
		w.mode = st.Mode & 0o7777
		if w.u.UID == 0 && (st.Uid != 0 || st.Gid != 0) {
			w.owner = &[2]int{int(st.Uid), int(st.Gid)}
		}
	case !errors.Is(err, fs.ErrNotExist):
		return newErr("write", w.path, nil, err)
	}
	if w.opts.Mode != 0 {
		w.mode = w.opts.Mode
	} else if !w.existed {
		w.mode = uint32(0o666 &^ w.m.umask)
	}
	return nil
}

// lstat describes the target, a symlink itself, in the held directory.
func (w *Writer) lstat() (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(int(w.dir), w.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: w.path, Err: err}
	}
	return &st, nil
}

// createTemp creates the temporary file, with the current content when
// appending; it runs as the user. A new file's owner is given through its
// descriptor.
func (w *Writer) createTemp() error {
	fd, err := unix.Openat(int(w.dir), w.tmpName, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return newErr("write", w.path, nil, &fs.PathError{Op: "open", Path: w.tmp, Err: err})
	}
	f := os.NewFile(uintptr(fd), w.tmp)
	w.f = f
	undo := func() {
		f.Close()
		unix.Unlinkat(int(w.dir), w.tmpName, 0)
	}
	if !w.existed && w.opts.Owner != nil && !w.opts.Owner.IsAgent() {
		if err := unix.Fchown(fd, int(w.opts.Owner.UID), int(w.opts.Owner.GID)); err != nil {
			undo()
			return newErr("write", w.path, nil, err)
		}
	}
	if err := setMetadata(fd, w.path, w.opts.Metadata); err != nil {
		undo()
		return err
	}
	if w.opts.Append && w.existed {
		ofd, err := unix.Openat(int(w.dir), w.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == nil {
			old := os.NewFile(uintptr(ofd), w.path)
			var dst io.Writer = f
			if w.hash != nil {
				dst = io.MultiWriter(f, w.hash)
			}
			w.size, err = io.Copy(dst, old)
			old.Close()
		}
		if err != nil {
			undo()
			return newErr("write", w.path, nil, err)
		}
	}
	return nil
}

// Path is the file being written.
func (w *Writer) Path() string { return w.path }

// Size is how many bytes the file has so far.
func (w *Writer) Size() int64 { return w.size }

// Write appends p to the new content. After a failure (the disk is full)
// the writer is aborted and every call returns that failure.
func (w *Writer) Write(p []byte) (int, error) {
	if err := w.usable(); err != nil {
		return 0, err
	}
	// Hashed after the write on the same goroutine: an upload's input
	// already arrives on another (the connection's reader, or ReadFrom's
	// caller), and hashing on a third cost more hand-offs than it saved
	// (docs/benchmarks.md).
	n, err := w.writeAsUser(p)
	if w.hash != nil {
		w.hash.Write(p[:n])
	}
	w.size += int64(n)
	if err != nil {
		return n, w.fail(newErr("write", w.path, nil, err))
	}
	return n, nil
}

// writeAsUser writes p to the temporary file with the user's identity.
// Permission was checked when the file was opened, but what a write may
// take of the disk is decided at each write, for the thread that writes:
// the blocks ext4 keeps for root, a quota's hard limit, both waived with
// CAP_SYS_RESOURCE, which the agent has and the user has not. Written as
// the user, an upload stops where the user's own cp would. It costs a
// switch there and back a write (about 27 µs here, BenchmarkWrite): at
// the sizes uploads write (up to 1 MiB), 2% of an HTTP upload.
func (w *Writer) writeAsUser(p []byte) (n int, err error) {
	if serr := w.m.as(w.u, func() error {
		n, err = w.f.Write(p)
		return nil
	}); serr != nil {
		return 0, serr
	}
	return n, err
}

// ReadFrom writes everything r yields; it makes io.Copy use big reads
// (copybufs.go). Each buffer is filled before it is written: readers such as a multipart
// part yield a few KiB a read, and a write costs per call (a system call
// and a hand-off).
//
// Reading and writing overlap: while one buffer is written (and hashed)
// on another goroutine, the next is read into a second one, so an HTTP
// upload reads the socket, writes the file and hashes at once, as the
// websocket's upload ring lets a websocket upload do. r is only read on
// the caller's goroutine, and ReadFrom returns only when no write is in
// flight: r (a request body) and w are the caller's again after it.
func (w *Writer) ReadFrom(r io.Reader) (int64, error) {
	bufs := [2]*[]byte{smallBufs.Get().(*[]byte), smallBufs.Get().(*[]byte)}
	defer func() {
		putBuf(bufs[0])
		putBuf(bufs[1])
	}()
	large := false // a buffer was filled: big ones from now on (copybufs.go)
	start := w.size
	written := make(chan error, 1)
	inFlight := false
	wait := func() error {
		if !inFlight {
			return nil
		}
		inFlight = false
		return <-written
	}
	for i := 0; ; i ^= 1 {
		if large {
			bufs[i] = grownBuf(bufs[i]) // free: its last write was waited for
		}
		n, rerr := fill(r, *bufs[i])
		large = large || n == len(*bufs[i])
		if werr := wait(); werr != nil {
			return w.size - start, werr
		}
		if n > 0 {
			p := (*bufs[i])[:n]
			inFlight = true
			go func() {
				_, err := w.Write(p)
				written <- err
			}()
		}
		if rerr != nil {
			err := wait()
			if err == nil && rerr != io.EOF {
				err = rerr
			}
			return w.size - start, err
		}
	}
}

// fill reads into p until it is full or r fails; err is r's, io.EOF at
// its end. (io.ReadFull would turn the end into io.ErrUnexpectedEOF, which
// cannot be told from a reader's own, such as a truncated gzip stream's.)
func fill(r io.Reader, p []byte) (n int, err error) {
	for n < len(p) && err == nil {
		var k int
		k, err = r.Read(p[n:])
		n += k
	}
	return n, err
}

func (w *Writer) usable() error {
	switch {
	case w.err != nil:
		return w.err
	case w.closed:
		return newErr("write", w.path, ErrInvalid, errWriterClosed)
	}
	return nil
}

// Commit makes the content durable (fsync) and renames it over the path.
// On failure the temporary file is removed and the path is as it was.
func (w *Writer) Commit() (Committed, error) {
	if err := w.ready(); err != nil {
		return Committed{}, err
	}
	return w.place()
}

// ready does all of Commit that can fail but the rename: the content is
// synced with its final owner and mode, and the target is checked as the
// rename will find it. On failure the writer is aborted.
func (w *Writer) ready() error {
	if err := w.usable(); err != nil {
		return err
	}
	if err := w.f.Sync(); err != nil {
		// Delayed allocation reports a full disk here, not at write.
		return w.fail(newErr("write", w.path, nil, err))
	}
	err := w.m.as(w.u, func() error {
		fd := int(w.f.Fd())
		if w.owner != nil {
			// Before the mode: a chown clears setuid and setgid.
			if err := unix.Fchown(fd, w.owner[0], w.owner[1]); err != nil {
				return err
			}
		}
		if err := unix.Fchmod(fd, w.mode); err != nil {
			return err
		}
		return w.checkTarget()
	})
	if err != nil {
		return w.fail(newErr("write", w.path, nil, err))
	}
	return nil
}

// checkTarget fails where the rename would, as far as can be seen before
// it: a file that appeared at an Exclusive path, a directory that did, a
// directory that went away.
func (w *Writer) checkTarget() error {
	st, err := w.lstat()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		var dst unix.Stat_t
		if err := unix.Fstat(int(w.dir), &dst); err == nil && dst.Nlink == 0 {
			return &fs.PathError{Op: "stat", Path: filepath.Dir(w.path), Err: unix.ENOENT}
		}
		return nil
	case err != nil:
		return err
	case w.opts.Exclusive:
		return newErr("write", w.path, ErrExists, nil)
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return newErr("write", w.path, ErrIsDir, nil)
	}
	return nil
}

// place renames the content of a ready writer over its path.
func (w *Writer) place() (Committed, error) {
	if err := w.m.as(w.u, w.rename); err != nil {
		return Committed{}, w.fail(newErr("write", w.path, nil, err))
	}
	w.closed = true
	w.f.Close()
	w.dir.close()
	w.m.journal.done(w.entry)
	c := Committed{Path: w.path, Size: w.size, Created: !w.existed}
	if w.hash != nil {
		c.SHA256 = hex.EncodeToString(w.hash.Sum(nil))
	}
	return c, nil
}

// rename puts the temporary file in place, in the held directory;
// Exclusive never replaces a file that appeared meanwhile.
func (w *Writer) rename() error {
	d := int(w.dir)
	if !w.opts.Exclusive {
		return pathErr("rename", w.path, unix.Renameat(d, w.tmpName, d, w.name))
	}
	err := unix.Renameat2(d, w.tmpName, d, w.name, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
		return pathErr("rename", w.path, err)
	}
	// A filesystem without RENAME_NOREPLACE: link fails if the path
	// exists, and the temporary name goes after.
	if err := unix.Linkat(d, w.tmpName, d, w.name, 0); err != nil {
		return pathErr("link", w.path, err)
	}
	return pathErr("remove", w.tmp, unix.Unlinkat(d, w.tmpName, 0))
}

// pathErr is err, if any, as an *fs.PathError.
func pathErr(op, path string, err error) error {
	if err == nil {
		return nil
	}
	return &fs.PathError{Op: op, Path: path, Err: err}
}

// Abort removes the temporary file; the path keeps its old content. It
// does nothing after Commit or an earlier Abort.
func (w *Writer) Abort() {
	if w.closed || w.err != nil {
		return
	}
	w.fail(newErr("write", w.path, ErrAbandoned, nil))
}

// fail ends the writer with err and removes its temporary file.
func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = err
		w.closed = true
		w.f.Close()
		w.m.as(w.u, func() error { return unix.Unlinkat(int(w.dir), w.tmpName, 0) })
		w.dir.close()
		w.m.journal.done(w.entry)
	}
	return w.err
}

// virtualFS reports filesystems whose files are kernel interfaces, not
// content: a temporary file cannot be created there, nor renamed over one.
func virtualFS(magic int64) bool {
	switch magic {
	case unix.PROC_SUPER_MAGIC, unix.SYSFS_MAGIC, unix.CGROUP_SUPER_MAGIC, unix.CGROUP2_SUPER_MAGIC,
		unix.DEBUGFS_MAGIC, unix.TRACEFS_MAGIC, unix.SECURITYFS_MAGIC, unix.BPF_FS_MAGIC,
		unix.PSTOREFS_MAGIC, unix.EFIVARFS_MAGIC:
		return true
	}
	return false
}
