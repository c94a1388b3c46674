package proc_test

import (
	"errors"
	"os/exec"
	"os/user"
	"slices"
	"strconv"
	"syscall"
	"testing"

	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/proc/proctest"
)

// In package proc_test, as proctest imports proc.

// The lookups are cached, yet a command run right after useradd, usermod
// -aG or userdel sees the change: the account files are checked on every
// lookup.
func TestAccountChangesSeenAtOnce(t *testing.T) {
	name, group := proctest.AccountNames(t)
	r := proc.ReaperForTests(t) // other tests of the package run it
	run := func(argv ...string) {
		t.Helper()
		proctest.Admin(t, r, argv...)
	}
	cred := func() *syscall.Credential {
		t.Helper()
		u, err := proc.LookupUser(name)
		if err != nil {
			t.Fatal(err)
		}
		c, err := proc.Credential(u)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	if _, err := proc.LookupUser(name); !errors.Is(err, proc.ErrUnknownUser) {
		t.Fatalf("before useradd: %v", err)
	}
	run("groupadd", group)
	t.Cleanup(func() { exec.Command("groupdel", group).Run() })
	run("useradd", "-M", "-s", "/usr/sbin/nologin", name)
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	g, err := user.LookupGroup(group)
	if err != nil {
		t.Fatal(err)
	}
	gid, _ := strconv.ParseUint(g.Gid, 10, 32)

	if c := cred(); slices.Contains(c.Groups, uint32(gid)) {
		t.Fatalf("groups %v have %s before usermod", c.Groups, group)
	}
	cred() // now from the cache
	run("usermod", "-aG", group, name)
	if c := cred(); !slices.Contains(c.Groups, uint32(gid)) {
		t.Fatalf("groups %v lack %s (gid %d) right after usermod -aG", c.Groups, group, gid)
	}
	run("userdel", name)
	if _, err := proc.LookupUser(name); !errors.Is(err, proc.ErrUnknownUser) {
		t.Fatalf("right after userdel: %v", err)
	}
}
