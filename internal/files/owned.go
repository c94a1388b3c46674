package files

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// Acting with the agent's rights on a user's behalf, as E2B's envd (which
// runs as root) does on its surface: the operation runs as the agent,
// and what it creates, missing directories and a new file, is given to
// the user (WriteOptions.Owner, MakeDirFor, MoveOptions.Owner). The
// native surface never does this: it acts as the user.

// Agent is the name (its uid) that resolves to the agent's own identity,
// for operations with its rights.
func (m *Manager) Agent() string { return strconv.FormatUint(uint64(m.self.uid), 10) }

// giveTo gives path to owner, unless owner is nil or the agent itself
// (who created it).
func (m *Manager) giveTo(path string, owner *User) error {
	if owner == nil || (owner.UID == m.self.uid && owner.GID == m.self.gid) {
		return nil
	}
	return os.Lchown(path, int(owner.UID), int(owner.GID))
}

// mkdirAllFor is os.MkdirAll that gives each directory it creates to
// owner (nil: left as created).
func (m *Manager) mkdirAllFor(dir string, perm fs.FileMode, owner *User) error {
	if owner == nil {
		return os.MkdirAll(dir, perm)
	}
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err == nil {
			if !st.IsDir() {
				return &fs.PathError{Op: "mkdir", Path: d, Err: errors.New("not a directory")}
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || d == "/" {
			return err
		}
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		err := os.Mkdir(missing[i], perm)
		if errors.Is(err, fs.ErrExist) {
			continue // made meanwhile, by someone else: not ours to give
		}
		if err != nil {
			return err
		}
		if err := m.giveTo(missing[i], owner); err != nil {
			return err
		}
	}
	return nil
}
