package files

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Type is what kind of entry a path is.
type Type uint8

const (
	TypeFile Type = iota + 1
	TypeDir
	TypeSymlink
	// TypeOther is a device, FIFO or socket.
	TypeOther
)

func (t Type) String() string {
	switch t {
	case TypeFile:
		return "file"
	case TypeDir:
		return "dir"
	case TypeSymlink:
		return "symlink"
	}
	return "other"
}

// Info describes one entry. A symlink is described itself (lstat), with
// its target as written in the link.
type Info struct {
	Name          string // last element of Path
	Path          string // absolute and clean
	Type          Type
	Size          int64
	Mode          fs.FileMode // permission bits, setuid, setgid, sticky and the type bits
	UID, GID      uint32
	Owner, Group  string // names, or the numbers when no account has them
	ModTime       time.Time
	SymlinkTarget string
	// Metadata is what a Writer stored with the file (WriteOptions), or
	// anything else set as a user.e2b.* extended attribute; nil if none,
	// or if the call did not ask for it (InfoOptions).
	Metadata map[string]string
	// Resolved is, for a symlink, what it leads to once every link on the
	// way is followed, with an absolute Path; nil for other entries and
	// for a link that leads nowhere the user can reach (dangling, a loop,
	// a directory the user cannot search).
	Resolved *Info
}

// Perm returns the permission bits with setuid, setgid and sticky, as a
// number for chmod (0o4755).
func (i Info) Perm() uint32 { return modeBits(i.Mode) }

// Permissions returns the mode as ls -l shows it: "-rw-r--r--",
// "drwxr-sr-x", "lrwxrwxrwx".
func (i Info) Permissions() string {
	b := []byte("-rwxrwxrwx")
	switch m := i.Mode; {
	case m.IsDir():
		b[0] = 'd'
	case m&fs.ModeSymlink != 0:
		b[0] = 'l'
	case m&fs.ModeNamedPipe != 0:
		b[0] = 'p'
	case m&fs.ModeSocket != 0:
		b[0] = 's'
	case m&fs.ModeCharDevice != 0:
		b[0] = 'c'
	case m&fs.ModeDevice != 0:
		b[0] = 'b'
	}
	perm := i.Mode.Perm()
	for bit := 0; bit < 9; bit++ {
		if perm&(1<<(8-bit)) == 0 {
			b[bit+1] = '-'
		}
	}
	special := func(set bool, at int, exec, noExec byte) {
		if !set {
			return
		}
		if b[at] == '-' {
			b[at] = noExec
		} else {
			b[at] = exec
		}
	}
	special(i.Mode&fs.ModeSetuid != 0, 3, 's', 'S')
	special(i.Mode&fs.ModeSetgid != 0, 6, 's', 'S')
	special(i.Mode&fs.ModeSticky != 0, 9, 't', 'T')
	return string(b)
}

// infoOf builds the Info of path from its lstat result. It reads a
// symlink's target, so it runs as the user like the lstat did.
func (m *Manager) infoOf(path string, st fs.FileInfo, o InfoOptions) Info {
	info := Info{Name: filepath.Base(path), Path: path, Size: st.Size(), Mode: st.Mode(), ModTime: st.ModTime()}
	switch {
	case st.Mode().IsRegular():
		info.Type = TypeFile
	case st.IsDir():
		info.Type = TypeDir
	case st.Mode()&fs.ModeSymlink != 0:
		info.Type = TypeSymlink
		info.SymlinkTarget, _ = os.Readlink(path)
		info.Resolved = m.resolved(path)
	default:
		info.Type = TypeOther
	}
	if o.Metadata && info.Type != TypeSymlink {
		info.Metadata = readMetadata(path)
	}
	if sys := statT(st); sys != nil {
		info.UID, info.GID = sys.Uid, sys.Gid
	}
	return info
}

// resolved describes what the symlink at path leads to, nil if nothing.
// The real path has no symlinks left, so its Info has no Resolved.
func (m *Manager) resolved(path string) *Info {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil
	}
	st, err := os.Lstat(real)
	if err != nil {
		return nil
	}
	info := m.infoOf(real, st, InfoOptions{})
	return &info
}

// named fills in the owner and group names (outside the user's thread:
// they need no permission, and the lookups are cached).
func (m *Manager) named(info *Info) {
	info.Owner = m.users.OwnerName(info.UID)
	info.Group = m.users.GroupName(info.GID)
	if info.Resolved != nil {
		m.named(info.Resolved)
	}
}

func statT(st fs.FileInfo) *syscall.Stat_t {
	sys, _ := st.Sys().(*syscall.Stat_t)
	return sys
}
