package proc

import (
	"os"
	"os/user"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

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

// The account files (the agent is static: os/user parses them itself,
// with no NSS).
const (
	passwdFile = "/etc/passwd"
	groupFile  = "/etc/group"
)

// AccountsStamp identifies the versions of /etc/passwd and /etc/group.
type AccountsStamp [2]fileStamp

// ReadAccountsStamp stats the account files.
func ReadAccountsStamp() AccountsStamp {
	return AccountsStamp{stampOf(passwdFile), stampOf(groupFile)}
}

// accountCache keeps what was found in one account file for as long as
// the file is unchanged. Parsing the files took 36 to 39 µs for one named
// user on the project's VM (user.Lookup, then GroupIds scanning every
// group; BenchmarkAccountLookup), paid by every command run as a named
// user: the default user of a sandbox image usually is one, and the e2b
// SDK names a user on every call. The file is stat'ed on every lookup, so
// that the command right after a useradd or a `usermod -aG` sees the
// change. Failed lookups are not kept: a user added a moment ago is found.
type accountCache[V any] struct {
	file  string
	mu    sync.Mutex
	stamp fileStamp
	m     map[string]V
}

// maxAccounts bounds a cache, so names that keep changing cannot grow it
// forever.
const maxAccounts = 1024

// get returns key's value, found by find when the cache lacks it.
func (c *accountCache[V]) get(key string, find func() (V, error)) (V, error) {
	now := stampOf(c.file)
	c.mu.Lock()
	if now != c.stamp || c.m == nil {
		c.stamp, c.m = now, map[string]V{}
	}
	v, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return v, nil
	}
	v, err := find()
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	// Not if another lookup has seen the file replaced meanwhile: what
	// find parsed may be the older version.
	if c.stamp == now && len(c.m) < maxAccounts {
		c.m[key] = v
	}
	c.mu.Unlock()
	return v, nil
}

// The caches hold pointers that never leave them: callers get copies.
var (
	users = accountCache[*user.User]{file: passwdFile}
	// creds are by user name, uid and gid: the groups come from
	// /etc/group, the primary group from /etc/passwd.
	creds = accountCache[*syscall.Credential]{file: groupFile}
)

func cachedUser(name string) (*user.User, error) {
	u, err := users.get(name, func() (*user.User, error) { return lookupUncached(name) })
	if err != nil {
		return nil, err
	}
	cp := *u
	return &cp, nil
}

func cachedCredential(u *user.User) (*syscall.Credential, error) {
	c, err := creds.get(u.Username+":"+u.Uid+":"+u.Gid, func() (*syscall.Credential, error) { return credentialUncached(u) })
	if err != nil {
		return nil, err
	}
	cp := *c
	cp.Groups = slices.Clone(c.Groups) // callers may change theirs
	return &cp, nil
}

func lookupUncached(name string) (*user.User, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if _, numErr := strconv.Atoi(name); numErr == nil {
			u, err = user.LookupId(name)
		}
	}
	if err != nil {
		return nil, err
	}
	return u, nil
}
