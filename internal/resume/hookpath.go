package resume

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A hook runs with its owner's rights, often root's, so whoever can
// replace it, or any directory above it, could run code as that owner.
// What is checked is what runs: the directories are walked one component
// at a time without following a symlink unseen, the hook is opened
// O_PATH|O_NOFOLLOW, its descriptor is checked, and that descriptor is
// executed (runOne). A hook runs only if no one but root and its owner can
// write the hook, its directory, the hooks root, or any directory above
// the root (sticky ones such as /tmp excepted: nobody can replace there
// what another owns).

// maxHookLinks bounds the symlinks followed on the way to the hooks
// directory, as the kernel's own path walk does (40).
const maxHookLinks = 40

// hookName is run-parts' rule: only names of letters, digits, '_' and
// '-' run, so backups ("50-ssh.bak", "50-ssh~", "50-ssh.dpkg-old") and
// an editor's temporary files never do.
func hookName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// pathDir is one directory met on the way to a hook directory.
type pathDir struct {
	path     string
	uid, gid uint32
	mode     uint32
	// above: a directory above the hooks root, where a sticky bit
	// protects what others own.
	above bool
}

// hookDir is a hook directory, opened: its descriptor and every
// directory its path went through.
type hookDir struct {
	fd   int // O_PATH
	path string
	dirs []pathDir
}

func (d *hookDir) close() { unix.Close(d.fd) }

// openHookDir opens root/event.d: a walk from "/" to the hooks root that
// records each directory, following a symlink only where the directory
// holding it is recorded too, then the event's directory in the root,
// which must be a directory itself (no symlink). os.ErrNotExist if either
// is missing.
func openHookDir(root string, event HookEvent) (*hookDir, error) {
	d, err := walkDir(root)
	if err != nil {
		return nil, err
	}
	d.dirs[len(d.dirs)-1].above = false
	name := string(event) + ".d"
	next, err := unix.Openat(d.fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		d.close()
		path := filepath.Join(d.path, name)
		if errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("%s: %w", path, os.ErrNotExist)
		}
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%s is not a directory (a symlink is not followed here)", path)
		}
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	unix.Close(d.fd)
	d.fd, d.path = next, filepath.Join(d.path, name)
	if err := d.record(false); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// record adds the directory d is at to its path.
func (d *hookDir) record(above bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return err
	}
	d.dirs = append(d.dirs, pathDir{path: d.path, uid: st.Uid, gid: st.Gid, mode: st.Mode, above: above})
	return nil
}

// walkDir opens the directory path by a walk from "/", recording every
// directory it goes through as above the hooks root.
func walkDir(path string) (*hookDir, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	todo := components(abs)
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	d := &hookDir{fd: fd, path: "/"}
	links := 0
	if err := d.record(true); err != nil {
		d.close()
		return nil, err
	}
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		next, err := unix.Openat(d.fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			d.close()
			if errors.Is(err, unix.ENOENT) {
				return nil, fmt.Errorf("%s: %w", filepath.Join(d.path, name), os.ErrNotExist)
			}
			return nil, fmt.Errorf("opening %s: %w", filepath.Join(d.path, name), err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(next, &st); err != nil {
			unix.Close(next)
			d.close()
			return nil, err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			// The link's directory is recorded: whoever could change the
			// link could change that directory. Its target is walked.
			target, err := readlinkFD(next)
			unix.Close(next)
			if links++; err == nil && links > maxHookLinks {
				err = unix.ELOOP
			}
			if err != nil {
				d.close()
				return nil, fmt.Errorf("following %s: %w", filepath.Join(d.path, name), err)
			}
			rest := append(components(target), todo...)
			if filepath.IsAbs(target) {
				unix.Close(d.fd)
				if d.fd, err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
					return nil, err
				}
				d.path = "/"
			}
			todo = rest
			continue
		case unix.S_IFDIR:
		default:
			unix.Close(next)
			d.close()
			return nil, fmt.Errorf("%s is not a directory", filepath.Join(d.path, name))
		}
		unix.Close(d.fd)
		d.fd = next
		if name == ".." {
			d.path = filepath.Dir(d.path)
		} else {
			d.path = filepath.Join(d.path, name)
		}
		if err := d.record(true); err != nil {
			d.close()
			return nil, err
		}
	}
	return d, nil
}

// components splits a path into its names, without empty ones and ".".
func components(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

func readlinkFD(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// writableByOthers says who else than root and owner could write a file
// or directory of mode, uid and gid ("" if nobody): its owner if that is
// someone else, its group if another user is in it, or everyone.
func writableByOthers(mode, uid, gid, owner uint32, sticky bool, members func(gid uint32) []uint32) string {
	if uid != 0 && uid != owner {
		return fmt.Sprintf("owned by uid %d", uid)
	}
	if sticky && mode&unix.S_ISVTX != 0 {
		// Others may add entries here but not replace what root or the
		// owner made.
		return ""
	}
	if mode&0o002 != 0 {
		return "writable by others"
	}
	if mode&0o020 != 0 {
		for _, m := range members(gid) {
			if m != 0 && m != owner {
				return fmt.Sprintf("writable by group %d, which uid %d is in", gid, m)
			}
		}
	}
	return ""
}

// refusedPath says why the hook directory d is not safe for a hook owned
// by owner, "" if it is.
func (d *hookDir) refusedPath(owner uint32, members func(gid uint32) []uint32) string {
	for _, dir := range d.dirs {
		if why := writableByOthers(dir.mode, dir.uid, dir.gid, owner, dir.above, members); why != "" {
			return fmt.Sprintf("directory %s is %s: anyone who can write it could make a hook run as uid %d", dir.path, why, owner)
		}
	}
	return ""
}

// groupMembers returns a function that lists the uids in a group: the
// users whose primary group it is, and those /etc/group names. Read once
// for a round of hooks; a group it cannot read counts as having others
// in it (so g+w is refused).
func groupMembers(passwdFile, groupFile string) func(gid uint32) []uint32 {
	uids := map[string]uint32{}
	primary := map[uint32][]uint32{}
	passwd, perr := os.ReadFile(passwdFile)
	for _, line := range strings.Split(string(passwd), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 4 {
			continue
		}
		uid, err1 := parseID(f[2])
		gid, err2 := parseID(f[3])
		if err1 != nil || err2 != nil {
			continue
		}
		uids[f[0]] = uid
		primary[gid] = append(primary[gid], uid)
	}
	listed := map[uint32][]string{}
	group, gerr := os.ReadFile(groupFile)
	for _, line := range strings.Split(string(group), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 4 {
			continue
		}
		gid, err := parseID(f[2])
		if err != nil {
			continue
		}
		for _, n := range strings.Split(f[3], ",") {
			if n = strings.TrimSpace(n); n != "" {
				listed[gid] = append(listed[gid], n)
			}
		}
	}
	return func(gid uint32) []uint32 {
		if perr != nil || gerr != nil {
			return []uint32{^uint32(0)} // unknown: someone else
		}
		out := append([]uint32(nil), primary[gid]...)
		for _, n := range listed[gid] {
			uid, ok := uids[n]
			if !ok {
				uid = ^uint32(0) // a name without a passwd entry: not root
			}
			out = append(out, uid)
		}
		return out
	}
}

func parseID(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err
}
