package files

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/users"
)

// Bounds of listings.
const (
	// MaxDepth is the deepest file_list goes: enough for a project tree,
	// and a bound on the work one request can ask for.
	MaxDepth = 16
	// MaxEntries bounds one listing, so an answer stays a size a client
	// can take in one message (about 200 bytes an entry).
	MaxEntries = 100_000
)

// Options configure a Manager. The zero value works: no streams, the
// agent's own user by default, no journal of temporary files.
type Options struct {
	// Registry receives the streams of transfers (ReadStream,
	// WriteStream).
	Registry *stream.Registry
	// Users resolves who operations run as (the default user for those
	// that name none); nil: a cache of the manager's own.
	Users *users.Accounts
	// StateDir holds the journal of temporary files, so that those a
	// crash left behind are removed at the next start.
	StateDir string
	Logger   *zap.Logger
	// AdminGroups name the groups whose members can become root (sudo,
	// wheel): Privileged says they may be served with the agent's
	// rights. None leaves only root.
	AdminGroups []string
}

// Manager runs file operations as the users that ask for them. It is safe
// for concurrent use.
type Manager struct {
	reg         *stream.Registry
	users       *users.Accounts
	log         *zap.Logger
	adminGroups []string
	self        identity
	// restoreIDs is restoreIDs; tests make the switch back fail with it.
	restoreIDs func(identity, bool) error
	umask      fs.FileMode
	journal    *journal
	// identities bounds the operations running as another user at once:
	// each holds an OS thread (identity_linux.go).
	identities chan struct{}
	// held counts the descriptors transfers hold open (held.go).
	held *heldSlots

	mu        sync.Mutex
	closed    bool
	transfers map[*stream.Stream]struct{}
	wg        sync.WaitGroup
}

// New returns a manager and removes the temporary files that writes cut
// short by a crash left behind.
func New(o Options) (*Manager, error) {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Users == nil {
		o.Users = users.New()
	}
	self, err := ownIdentity()
	if err != nil {
		return nil, err
	}
	m := &Manager{
		reg: o.Registry, users: o.Users, log: o.Logger, adminGroups: o.AdminGroups, self: self, restoreIDs: restoreIDs,
		umask: processUmask(), transfers: map[*stream.Stream]struct{}{},
		identities: make(chan struct{}, identityThreads), held: newHeldSlots(heldBudget()),
	}
	if o.StateDir != "" {
		if m.journal, err = openJournal(filepath.Join(o.StateDir, "files-temp"), o.Logger); err != nil {
			return nil, err
		}
		m.journal.cleanup(m)
	}
	return m, nil
}

// Close ends every transfer (a write in progress is abandoned: its
// temporary file is removed) and waits for them.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.wg.Wait()
		return
	}
	m.closed = true
	m.mu.Unlock()
	m.endTransfers()
	m.wg.Wait()
}

// User resolves a user name (or uid) as operations do: "" is the default
// user, or the agent's own when there is no default.
func (m *Manager) User(name string) (User, error) {
	u, err := m.users.ResolveRecent(name)
	if errors.Is(err, users.ErrUnknown) {
		return User{}, newErr("user", m.users.Named(name), ErrUnknownUser, nil)
	}
	return u, err
}

// resolve returns the user and the absolute, clean path an operation
// works on: a relative path is relative to the user's home.
func (m *Manager) resolve(op, userName, path string) (User, string, error) {
	u, err := m.User(userName)
	if err != nil {
		return u, "", err
	}
	p, err := absFor(u, op, path)
	if err == nil {
		err = m.clean(u, op, p)
	}
	return u, p, err
}

// clean refuses, for an operation as another user, a path that goes
// through a magic link (magic.go). The agent's own operations may: they
// reach nothing the agent could not anyway.
func (m *Manager) clean(u User, op, p string) error {
	if u.UID == m.self.uid && u.GID == m.self.gid {
		return nil
	}
	return noMagicLinks(op, p)
}

func absFor(u User, op, path string) (string, error) {
	switch {
	case path == "":
		return "", newErr(op, path, ErrInvalid, errEmptyPath)
	case strings.IndexByte(path, 0) >= 0:
		return "", newErr(op, strings.ReplaceAll(path, "\x00", `\0`), ErrInvalid, errNULPath)
	case !filepath.IsAbs(path):
		home := u.Home
		if home == "" {
			home = "/"
		}
		path = filepath.Join(home, path)
	}
	return filepath.Clean(path), nil
}

// Stat describes the entry at path; a symlink is described itself.
func (m *Manager) Stat(userName, path string) (Info, error) {
	return m.StatWith(userName, path, InfoOptions{})
}

// InfoOptions say what Infos carry beyond what the inode says.
type InfoOptions struct {
	// Metadata reads Info.Metadata: a system call more an entry, so
	// callers that show no metadata leave it out.
	Metadata bool
}

// StatWith is Stat with options.
func (m *Manager) StatWith(userName, path string, o InfoOptions) (Info, error) {
	u, p, err := m.resolve("stat", userName, path)
	if err != nil {
		return Info{}, err
	}
	var info Info
	err = m.as(u, func() error {
		st, err := os.Lstat(p)
		if err != nil {
			return newErr("stat", p, nil, err)
		}
		info = m.infoOf(p, st, o)
		return nil
	})
	if err != nil {
		return Info{}, err
	}
	m.named(&info)
	return info, nil
}

// List returns the entries of the directory at path (a symlink to a
// directory is followed) down to depth levels (1: the directory's own
// entries; 0 means 1), depth first with names sorted. Symlinks inside are
// reported, never followed. A subdirectory the user cannot read is listed
// without its entries.
func (m *Manager) List(userName, path string, depth int) ([]Info, error) {
	return m.ListWith(userName, path, depth, InfoOptions{})
}

// ListWith is List with options.
func (m *Manager) ListWith(userName, path string, depth int, o InfoOptions) ([]Info, error) {
	u, p, err := m.resolve("list", userName, path)
	if err != nil {
		return nil, err
	}
	if depth <= 0 {
		depth = 1
	}
	if depth > MaxDepth {
		return nil, newErr("list", p, ErrInvalid, errDepth)
	}
	var out []Info
	err = m.as(u, func() error {
		st, err := os.Stat(p)
		if err != nil {
			return newErr("list", p, nil, err)
		}
		if !st.IsDir() {
			return newErr("list", p, ErrNotDir, nil)
		}
		return m.walk(p, depth, true, o, &out)
	})
	if err != nil {
		return nil, err
	}
	for i := range out {
		m.named(&out[i])
	}
	return out, nil
}

func (m *Manager) walk(dir string, depth int, top bool, o InfoOptions, out *[]Info) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if top {
			return newErr("list", dir, nil, err)
		}
		return nil
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		st, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		if len(*out) >= MaxEntries {
			return newErr("list", dir, ErrTooMany, errTooMany)
		}
		*out = append(*out, m.infoOf(p, st, o))
		if depth > 1 && st.IsDir() {
			if err := m.walk(p, depth-1, false, o, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// MakeDir creates a directory, and with parents its missing parents, with
// mode 0777 less the umask, owned by the user. An existing directory is
// ErrExists; an existing entry of another type is ErrExists and ErrNotDir
// (a file is in the way), like a file in the way of a parent is ErrNotDir.
func (m *Manager) MakeDir(userName, path string, parents bool) error {
	return m.MakeDirFor(userName, path, parents, nil)
}

// MakeDirFor is MakeDir that gives the directories it creates to owner
// (nil: the user's, as created), for one with the agent's rights on a
// user's behalf (owned.go).
func (m *Manager) MakeDirFor(userName, path string, parents bool, owner *User) error {
	u, p, err := m.resolve("mkdir", userName, path)
	if err != nil {
		return err
	}
	noMagic := m.noMagicFor(u, owner)
	owner = gift(owner)
	return m.as(u, func() error {
		if st, err := os.Stat(p); err == nil {
			if st.IsDir() {
				return newErr("mkdir", p, ErrExists, nil)
			}
			return newErr("mkdir", p, ErrExists, ErrNotDir)
		}
		var d dirFD
		var err error
		if parents {
			d, err = mkdirAll(p, 0o777, owner, noMagic)
		} else if d, err = openDir(filepath.Dir(p), noMagic); err == nil {
			err = pathErr("mkdir", p, d.mkdirAt(filepath.Base(p), 0o777, owner))
		}
		if err != nil {
			return newErr("mkdir", p, nil, err)
		}
		d.close()
		return nil
	})
}

// Remove removes a file, symlink or empty directory, or with recursive a
// whole tree. A non-empty directory without recursive is ErrNotEmpty.
func (m *Manager) Remove(userName, path string, recursive bool) error {
	u, p, err := m.resolve("remove", userName, path)
	if err != nil {
		return err
	}
	if p == "/" {
		return newErr("remove", p, ErrInvalid, errRemoveRoot)
	}
	noMagic := m.noMagicFor(u, nil)
	return m.as(u, func() error {
		if _, err := os.Lstat(p); err != nil {
			return newErr("remove", p, nil, err)
		}
		var err error
		if recursive {
			err = os.RemoveAll(p)
		} else {
			err = removeAt(p, noMagic)
		}
		if err != nil {
			return newErr("remove", p, nil, err)
		}
		return nil
	})
}

// removeAt is os.Remove relative to the descriptor of p's directory.
func removeAt(p string, noMagic bool) error {
	d, err := openDir(filepath.Dir(p), noMagic)
	if err != nil {
		return err
	}
	defer d.close()
	name := filepath.Base(p)
	err = unix.Unlinkat(int(d), name, 0)
	if err == nil {
		return nil
	}
	rerr := unix.Unlinkat(int(d), name, unix.AT_REMOVEDIR)
	if rerr == nil {
		return nil
	}
	// Both failed: the rmdir's error says more, unless p is no directory.
	if !errors.Is(rerr, unix.ENOTDIR) {
		err = rerr
	}
	return &fs.PathError{Op: "remove", Path: p, Err: err}
}

// Chmod sets the permission bits (with setuid 0o4000, setgid 0o2000 and
// sticky 0o1000) of path; a symlink's target is changed.
func (m *Manager) Chmod(userName, path string, mode uint32) error {
	u, p, err := m.resolve("chmod", userName, path)
	if err != nil {
		return err
	}
	if mode > 0o7777 {
		return newErr("chmod", p, ErrInvalid, errMode)
	}
	return m.as(u, func() error {
		if err := unix.Fchmodat(unix.AT_FDCWD, p, mode, 0); err != nil {
			return newErr("chmod", p, nil, err)
		}
		return nil
	})
}

// Chown sets the owner and group of path, each given by name or number;
// an empty one is left unchanged. Only root may give a file away; a user
// may change the group to one of its own.
func (m *Manager) Chown(userName, path, owner, group string) error {
	u, p, err := m.resolve("chown", userName, path)
	if err != nil {
		return err
	}
	if owner == "" && group == "" {
		return newErr("chown", p, ErrInvalid, errNoOwner)
	}
	uid, gid := -1, -1
	if owner != "" {
		n, err := m.owner(owner)
		if err != nil {
			return err
		}
		uid = int(n)
	}
	if group != "" {
		n, err := m.group(group)
		if err != nil {
			return err
		}
		gid = int(n)
	}
	return m.as(u, func() error {
		if err := os.Chown(p, uid, gid); err != nil {
			return newErr("chown", p, nil, err)
		}
		return nil
	})
}
