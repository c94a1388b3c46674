package resume

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The steps of a pause that act on filesystems and memory. Each reports
// what it did in words for the pause's answer.

// FIFREEZE and FITHAW (linux/fs.h: _IOWR('X', 119 and 120, int)): the
// same numbers on every architecture Go runs the agent on.
const (
	ioctlFIFREEZE = 0xC0045877
	ioctlFITHAW   = 0xC0045878
)

// filesystem is a mounted, writable, block-backed filesystem: what a
// snapshot of the disk holds and the page cache may hold back from it.
type filesystem struct {
	dir    string
	fstype string
}

// writableFilesystems lists the writable filesystems backed by a device
// (not proc, tmpfs, cgroup, nsfs and the other kinds /proc/filesystems
// marks nodev or does not list: nothing of theirs reaches a disk), one
// mount per device, in mount order.
func writableFilesystems() ([]filesystem, error) {
	block, err := blockTypes()
	if err != nil {
		return nil, err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountinfo(f, block, func(dir string) bool {
		st, err := os.Stat(dir)
		return err == nil && st.IsDir()
	})
}

// parseMountinfo picks the mounts of mountinfo to sync: writable, of a
// type in block, one per device, the first whose mount point isDir says
// is a directory (a single file bind-mounted, as `ip netns add` and
// container runtimes do, cannot be opened as one).
func parseMountinfo(r io.Reader, block map[string]bool, isDir func(string) bool) ([]filesystem, error) {
	var out []filesystem
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - type source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		a, b := strings.Fields(pre), strings.Fields(post)
		if !ok || len(a) < 6 || len(b) < 1 {
			continue
		}
		dev, dir, opts, fstype := a[2], unescapeMount(a[4]), strings.Split(a[5], ","), b[0]
		if !block[fstype] || !slices.Contains(opts, "rw") || seen[dev] || !isDir(dir) {
			continue
		}
		seen[dev] = true
		out = append(out, filesystem{dir: dir, fstype: fstype})
	}
	return out, sc.Err()
}

// blockTypes are the filesystem types /proc/filesystems lists without
// nodev: those that keep their data on a device.
func blockTypes() (map[string]bool, error) {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return nil, err
	}
	m := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if name, ok := strings.CutPrefix(line, "\t"); ok && name != "" {
			m[strings.TrimSpace(name)] = true
		}
	}
	return m, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 is a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func dirs(fss []filesystem) string {
	names := make([]string, len(fss))
	for i, f := range fss {
		names[i] = f.dir + " (" + f.fstype + ")"
	}
	return strings.Join(names, ", ")
}

// syncFilesystems writes every filesystem's dirty pages and metadata to
// its device (syncfs), so a snapshot of the disk alone holds them.
func syncFilesystems(fss []filesystem) (string, error) {
	var errs []error
	for _, f := range fss {
		fd, err := unix.Open(f.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Syncfs(fd)
			unix.Close(fd)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("syncfs %s: %w", f.dir, err))
		}
	}
	return "synced " + dirs(fss), errors.Join(errs...)
}

// fsIoctl issues FIFREEZE and FITHAW; tests record the calls instead, so
// the order of a pause's steps can be checked without freezing the
// machine's own disks.
var fsIoctl = unix.IoctlSetInt

// frozenFS is a filesystem FIFREEZE froze, held open to thaw it.
type frozenFS struct {
	dir string
	fd  int
}

// freezeFilesystems freezes every filesystem (FIFREEZE: writers block,
// the disk is consistent as after a clean unmount), the last mounted
// first so a mount under another is frozen before it. A filesystem that
// cannot be frozen (no support: EOPNOTSUPP; frozen by someone else:
// EBUSY) is reported and left.
func freezeFilesystems(fss []filesystem) ([]frozenFS, string, error) {
	var frozen []frozenFS
	var errs []error
	for _, f := range slices.Backward(fss) {
		fd, err := unix.Open(f.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err == nil {
			if err = fsIoctl(fd, ioctlFIFREEZE, 0); err != nil {
				unix.Close(fd)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("FIFREEZE %s: %w", f.dir, err))
			continue
		}
		frozen = append(frozen, frozenFS{dir: f.dir, fd: fd})
	}
	names := make([]string, len(frozen))
	for i, f := range frozen {
		names[i] = f.dir
	}
	return frozen, "froze " + strings.Join(names, ", "), errors.Join(errs...)
}

// thawFilesystems thaws what freezeFilesystems froze, in reverse order.
func thawFilesystems(frozen []frozenFS) (string, error) {
	var errs []error
	var names []string
	for _, f := range slices.Backward(frozen) {
		if err := fsIoctl(f.fd, ioctlFITHAW, 0); err != nil {
			errs = append(errs, fmt.Errorf("FITHAW %s: %w", f.dir, err))
		} else {
			names = append(names, f.dir)
		}
		unix.Close(f.fd)
	}
	return "thawed " + strings.Join(names, ", "), errors.Join(errs...)
}

// ThawAllFilesystems thaws every writable block-backed filesystem: a new
// agent runs it at start where an agent that died during a pause may
// have left them frozen (FITHAW of a filesystem not frozen does nothing
// but fail with EINVAL).
func ThawAllFilesystems() {
	fss, err := writableFilesystems()
	if err != nil {
		return
	}
	for _, f := range fss {
		fd, err := unix.Open(f.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		unix.IoctlSetInt(fd, ioctlFITHAW, 0)
		unix.Close(fd)
	}
}

// shrinkMemory makes the snapshot smaller. Every level returns the
// agent's free heap to the OS. cache also drops the clean page cache
// (written back by the sync step before it); all also drops the
// reclaimable slab (dentries and inodes) and compacts memory, so that
// the balloon's free page reporting, which reports whole 2 MiB blocks,
// finds more of them. wholeVM false (not a sandbox VM: the machine is
// shared) leaves the VM-wide steps out and says why.
func shrinkMemory(level Shrink, wholeVM bool, why string) (string, error) {
	debug.FreeOSMemory()
	done := []string{"returned the agent's free heap"}
	if level == ShrinkNone {
		return done[0], nil
	}
	if !wholeVM {
		return done[0] + "; left the page cache: " + why, nil
	}
	drop := "1"
	if level == ShrinkAll {
		drop = "3"
	}
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte(drop), 0); err != nil {
		return strings.Join(done, "; "), fmt.Errorf("dropping caches: %w", err)
	}
	done = append(done, map[string]string{"1": "dropped the clean page cache", "3": "dropped the clean page cache, dentries and inodes"}[drop])
	if level == ShrinkAll {
		if err := os.WriteFile("/proc/sys/vm/compact_memory", []byte("1"), 0); err != nil {
			return strings.Join(done, "; "), fmt.Errorf("compacting memory: %w", err)
		}
		done = append(done, "compacted memory")
	}
	return strings.Join(done, "; "), nil
}

// memAvailable is /proc/meminfo's MemAvailable in bytes, 0 if unknown.
func memAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}
