package files

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestPartlyRootAccountsAreSwitched: an account that shares only one of
// the agent's ids (root's uid with another group, or another uid whose
// primary group is root's) is not the agent: what it does runs with its
// own ids, and what it makes is owned by them.
func TestPartlyRootAccountsAreSwitched(t *testing.T) {
	needRoot(t)
	m, _ := newManager(t)
	dir := t.TempDir()
	openToAll(t, dir)
	self := User{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
	for i, u := range []User{
		{Name: "group-of-root", UID: 65534, GID: self.GID, Groups: []uint32{self.GID}},
		{Name: "uid-of-root", UID: self.UID, GID: 65534, Groups: []uint32{65534}},
	} {
		p := filepath.Join(dir, fmt.Sprint(i))
		if err := m.as(u, func() error { return os.WriteFile(p, nil, 0o644) }); err != nil {
			t.Fatalf("%s: %v", u.Name, err)
		}
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if sys.Uid != u.UID || sys.Gid != u.GID {
			t.Fatalf("%s (%d:%d) made a file owned by %d:%d: it acted with the agent's ids", u.Name, u.UID, u.GID, sys.Uid, sys.Gid)
		}
	}
}
