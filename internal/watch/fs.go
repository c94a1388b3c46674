package watch

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// isDir reports whether path is a directory, not following symlinks, so
// that a symlink inside a tree never pulls another tree into the watch.
func isDir(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.IsDir()
}

// readSubdirs returns the names of dir's child directories.
func readSubdirs(dir string) (map[string]struct{}, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	return subdirsOf(entries), nil
}

func subdirsOf(entries []os.DirEntry) map[string]struct{} {
	subdirs := make(map[string]struct{})
	for _, e := range entries {
		if e.IsDir() {
			subdirs[e.Name()] = struct{}{}
		}
	}
	return subdirs
}

// dirID identifies the directory at path, not following a final symlink,
// across its removal and the creation of another at the same path: by file
// handle where the filesystem has one (it holds the inode's generation, so
// a reused inode number differs), else by device and inode number.
func dirID(path string) (string, error) {
	if h, mnt, err := unix.NameToHandleAt(unix.AT_FDCWD, path, 0); err == nil {
		return fmt.Sprintf("%d:%d:%x", mnt, h.Type(), h.Bytes()), nil
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return "", err
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fmt.Sprintf("%d/%d", st.Dev, st.Ino), nil
}
