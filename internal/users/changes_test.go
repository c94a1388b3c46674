package users_test

import (
	"errors"
	"os/exec"
	"os/user"
	"slices"
	"strconv"
	"syscall"
	"testing"

	"github.com/rayito/rayito-agent/internal/proc/proctest"
	"github.com/rayito/rayito-agent/internal/users"
)

// In package users_test, as proctest imports proc.

// The lookups are cached, yet a command run right after useradd, usermod
// -aG or userdel sees the change: the account files are checked on every
// lookup.
func TestAccountChangesSeenAtOnce(t *testing.T) {
	name, group := proctest.AccountNames(t)
	accounts := users.New()
	run := func(argv ...string) {
		t.Helper()
		proctest.Admin(t, nil, argv...) // no reaper in this test binary
	}
	cred := func() *syscall.Credential {
		t.Helper()
		u, err := accounts.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		return u.Credential()
	}

	if _, err := accounts.Lookup(name); !errors.Is(err, users.ErrUnknown) {
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
	if _, err := accounts.Lookup(name); !errors.Is(err, users.ErrUnknown) {
		t.Fatalf("right after userdel: %v", err)
	}
}
