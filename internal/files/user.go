package files

import (
	"errors"
	"os/user"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rayito/rayito-agent/internal/proc"
)

// User is the account an operation runs as.
type User struct {
	Name   string
	UID    uint32
	GID    uint32
	Groups []uint32 // supplementary groups
	Home   string
}

// accounts resolves user names and ids, and caches what it found for as
// long as /etc/passwd and /etc/group are unchanged: a stat of the two is
// far cheaper than parsing them (or asking NSS) on every operation, and
// is itself done at most every accountsCheck.
type accounts struct {
	mu      sync.Mutex
	stamp   proc.AccountsStamp
	checked time.Time
	users   map[string]User
	owners  map[uint32]string
	groups  map[uint32]string
}

// maxCachedNames bounds the uid and gid name caches: a tree of files
// from many foreign ids (an unpacked archive) must not grow them forever.
const maxCachedNames = 4096

// accountsCheck is how long a change to the account files may go
// unnoticed: a user added with useradd is known to file operations within
// it.
const accountsCheck = time.Second

// freshLocked drops the cache if an account file changed since it was
// filled.
func (a *accounts) freshLocked() {
	if a.users != nil && time.Since(a.checked) < accountsCheck {
		return
	}
	a.checked = time.Now()
	if now := proc.ReadAccountsStamp(); now != a.stamp || a.users == nil {
		a.stamp = now
		a.users = map[string]User{}
		a.owners = map[uint32]string{}
		a.groups = map[uint32]string{}
	}
}

// lookup resolves an account by name or number ("" is the agent's own).
func (a *accounts) lookup(name string) (User, error) {
	a.mu.Lock()
	a.freshLocked()
	u, ok := a.users[name]
	a.mu.Unlock()
	if ok {
		return u, nil
	}
	pw, err := proc.LookupUser(name)
	if errors.Is(err, proc.ErrUnknownUser) {
		return User{}, newErr("user", name, ErrUnknownUser, nil)
	} else if err != nil {
		return User{}, err
	}
	cred, err := proc.Credential(pw)
	if err != nil {
		return User{}, err
	}
	u = User{Name: pw.Username, UID: cred.Uid, GID: cred.Gid, Groups: cred.Groups, Home: pw.HomeDir}
	if !slices.Contains(u.Groups, u.GID) {
		u.Groups = append(u.Groups, u.GID)
	}
	a.mu.Lock()
	if len(a.users) < maxCachedNames {
		a.users[name] = u
	}
	a.mu.Unlock()
	return u, nil
}

// owner returns the name of a uid, or the number when no account has it.
func (a *accounts) owner(uid uint32) string {
	return a.name(uid, func(m *accounts) map[uint32]string { return m.owners }, func(id string) (string, error) {
		u, err := user.LookupId(id)
		if err != nil {
			return "", err
		}
		return u.Username, nil
	})
}

// group returns the name of a gid, or the number when no group has it.
func (a *accounts) group(gid uint32) string {
	return a.name(gid, func(m *accounts) map[uint32]string { return m.groups }, func(id string) (string, error) {
		g, err := user.LookupGroupId(id)
		if err != nil {
			return "", err
		}
		return g.Name, nil
	})
}

func (a *accounts) name(id uint32, cache func(*accounts) map[uint32]string, look func(string) (string, error)) string {
	a.mu.Lock()
	a.freshLocked()
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
	if m := cache(a); len(m) < maxCachedNames {
		m[id] = n
	}
	a.mu.Unlock()
	return n
}

// uidOf resolves an owner given by name or number.
func (a *accounts) uidOf(name string) (uint32, error) {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(n), nil
	}
	u, err := a.lookup(name)
	if err != nil {
		return 0, err
	}
	return u.UID, nil
}

// gidOf resolves a group given by name or number.
func (a *accounts) gidOf(name string) (uint32, error) {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(n), nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, newErr("group", name, ErrUnknownUser, nil)
	}
	n, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return 0, newErr("group", name, ErrUnknownUser, err)
	}
	return uint32(n), nil
}
