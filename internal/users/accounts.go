// Package users resolves the sandbox's accounts: who a request runs as
// (by name or uid), their ids, groups and home, and the names of the ids
// a file carries. It is one capability, built once in main and handed to
// every manager that acts as a user (commands, terminals, kernels, file
// operations), so that they share one cache and agree on what they find.
//
// The agent is static: os/user parses /etc/passwd and /etc/group itself,
// with no NSS. Parsing them took 36 to 39 µs for one named user on the
// project's VM (a user.Lookup, then GroupIds scanning every group), paid
// by every command run as a named user: the default user of a sandbox
// image usually is one, and the e2b SDK names a user on every call. So
// what is found is kept for as long as the files are unchanged: they are
// stat'ed on every lookup, so that the command right after a useradd or a
// `usermod -aG` sees the change. Failed lookups are not kept: a user added
// a moment ago is found.
package users

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ErrUnknown is a name or number no account has.
var ErrUnknown = errors.New("no such user or group")

// The account files.
const (
	passwdFile = "/etc/passwd"
	groupFile  = "/etc/group"
)

// maxCached bounds each cache, so names that keep changing cannot grow it
// forever (a tree of files from many foreign ids, say).
const maxCached = 4096

// recentCheck is how long a change to the account files may go unnoticed
// by ResolveRecent, OwnerName and GroupName, which file operations call
// (a listing, for every entry): a file's owner named a second late is
// still its owner.
const recentCheck = time.Second

// Account is a user an operation runs as.
type Account struct {
	Name string
	UID  uint32
	GID  uint32
	// Groups are the supplementary groups, the primary one among them.
	// The slice is shared with the cache: read it, never change it
	// (Credential gives a copy).
	Groups []uint32
	Home   string
}

// Credential is what a process of the account is started with.
func (a Account) Credential() *syscall.Credential {
	return &syscall.Credential{Uid: a.UID, Gid: a.GID, Groups: slices.Clone(a.Groups)}
}

// IsAgent reports whether the account is the agent's own user.
func (a Account) IsAgent() bool { return a.UID == uint32(os.Getuid()) }

// Accounts resolves and caches accounts. Its zero value works; it is safe
// for concurrent use.
type Accounts struct {
	mu sync.Mutex
	// def is the default user: who a request naming nobody runs as
	// (--default-user, /v1/init's default_user); "" is the agent's own.
	def     string
	stamp   [2]fileStamp
	checked time.Time // when stamp was last read
	byName  map[string]Account
	owners  map[uint32]string
	groups  map[uint32]string
}

// New returns an empty cache.
func New() *Accounts { return &Accounts{} }

// SetDefault makes name the default user; "" leaves it unchanged.
func (a *Accounts) SetDefault(name string) {
	if name == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.def = name
}

// Named is who a request naming name runs as: name, or the default user
// ("" when there is none either: the agent's own user).
func (a *Accounts) Named(name string) string {
	if name != "" {
		return name
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.def
}

// Resolve is Lookup of Named(name): the account a request naming name
// runs as.
func (a *Accounts) Resolve(name string) (Account, error) { return a.lookup(a.Named(name), 0) }

// ResolveRecent is Resolve as of at most a second ago (recentCheck): for
// file operations, which may come by the thousand and whose two stats of
// the account files would cost a third of a stat as another user. A user
// added with useradd is known to them within the second.
func (a *Accounts) ResolveRecent(name string) (Account, error) {
	return a.lookup(a.Named(name), recentCheck)
}

// Lookup finds an account by name, or by uid when name is a number that
// no account is named; "" is the agent's own user. A name no account has
// is ErrUnknown.
func (a *Accounts) Lookup(name string) (Account, error) { return a.lookup(name, 0) }

// lookup is Lookup with the account files checked unless they were
// within every.
func (a *Accounts) lookup(name string, every time.Duration) (Account, error) {
	a.mu.Lock()
	a.freshLocked(every)
	acc, ok := a.byName[name]
	stamp := a.stamp
	a.mu.Unlock()
	if ok {
		return acc, nil
	}
	acc, err := find(name)
	if err != nil {
		return Account{}, err
	}
	a.mu.Lock()
	// Not if another lookup has seen the files replaced meanwhile: what
	// find parsed may be the older version.
	if a.stamp == stamp && len(a.byName) < maxCached {
		a.byName[name] = acc
	}
	a.mu.Unlock()
	return acc, nil
}

// find parses the account files for name.
func find(name string) (Account, error) {
	var u *user.User
	var err error
	if name == "" {
		if u, err = user.Current(); err != nil {
			return Account{}, fmt.Errorf("cannot look up the agent's own user: %w", err)
		}
	} else if u, err = user.Lookup(name); err != nil {
		if _, numErr := strconv.Atoi(name); numErr == nil {
			u, err = user.LookupId(name)
		}
		if err != nil {
			return Account{}, fmt.Errorf("user %q: %w", name, ErrUnknown)
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return Account{}, fmt.Errorf("user %q has non-numeric ids", u.Username)
	}
	acc := Account{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir}
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				acc.Groups = append(acc.Groups, uint32(n))
			}
		}
	}
	if !slices.Contains(acc.Groups, acc.GID) {
		acc.Groups = append(acc.Groups, acc.GID)
	}
	return acc, nil
}

// UID resolves an owner given by name or number.
func (a *Accounts) UID(name string) (uint32, error) {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(n), nil
	}
	acc, err := a.Lookup(name)
	if err != nil {
		return 0, err
	}
	return acc.UID, nil
}

// GID resolves a group given by name or number.
func (a *Accounts) GID(name string) (uint32, error) {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(n), nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, fmt.Errorf("group %q: %w", name, ErrUnknown)
	}
	n, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("group %q has a non-numeric id", name)
	}
	return uint32(n), nil
}

// OwnerName is the name of a uid, or the number when no account has it.
func (a *Accounts) OwnerName(uid uint32) string {
	return a.name(uid, func(a *Accounts) map[uint32]string { return a.owners }, func(id string) (string, error) {
		u, err := user.LookupId(id)
		if err != nil {
			return "", err
		}
		return u.Username, nil
	})
}

// GroupName is the name of a gid, or the number when no group has it.
func (a *Accounts) GroupName(gid uint32) string {
	return a.name(gid, func(a *Accounts) map[uint32]string { return a.groups }, func(id string) (string, error) {
		g, err := user.LookupGroupId(id)
		if err != nil {
			return "", err
		}
		return g.Name, nil
	})
}

func (a *Accounts) name(id uint32, cache func(*Accounts) map[uint32]string, look func(string) (string, error)) string {
	a.mu.Lock()
	a.freshLocked(recentCheck)
	n, ok := cache(a)[id]
	a.mu.Unlock()
	if ok {
		return n
	}
	s := strconv.FormatUint(uint64(id), 10)
	if got, err := look(s); err == nil {
		n = got
	} else {
		n = s
	}
	a.mu.Lock()
	if m := cache(a); len(m) < maxCached {
		m[id] = n
	}
	a.mu.Unlock()
	return n
}

// freshLocked drops the caches if an account file changed since they
// were filled, checking the files unless they were checked within every.
func (a *Accounts) freshLocked(every time.Duration) {
	if a.byName != nil && every > 0 && time.Since(a.checked) < every {
		return
	}
	a.checked = time.Now()
	if now := a.readStamp(); now != a.stamp || a.byName == nil {
		a.stamp = now
		a.byName = map[string]Account{}
		a.owners = map[uint32]string{}
		a.groups = map[uint32]string{}
	}
}

func (a *Accounts) readStamp() [2]fileStamp {
	return [2]fileStamp{stampOf(passwdFile), stampOf(groupFile)}
}

// fileStamp identifies a version of a file: it changes when the file is
// replaced (useradd, usermod and vipw write a new file and rename it over
// the old) or written in place.
type fileStamp struct {
	mtime time.Time
	size  int64
	ino   uint64
}

func stampOf(path string) fileStamp {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	s := fileStamp{mtime: st.ModTime(), size: st.Size()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.ino = sys.Ino
	}
	return s
}
