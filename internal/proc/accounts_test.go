package proc

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The lookups are cached, yet a command run right after useradd, usermod
// -aG or userdel sees the change: the account files are checked on every
// lookup.
func TestAccountChangesSeenAtOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to add users")
	}
	for _, tool := range []string{"useradd", "groupadd", "usermod", "userdel", "groupdel"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	suffix := make([]byte, 4)
	rand.Read(suffix)
	name, group := "rayito-u"+hex.EncodeToString(suffix), "rayito-g"+hex.EncodeToString(suffix)
	run := func(argv ...string) {
		t.Helper()
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", argv, err, strings.TrimSpace(string(out)))
		}
	}
	cred := func() *syscall.Credential {
		t.Helper()
		u, err := LookupUser(name)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Credential(u)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	if _, err := LookupUser(name); !errors.Is(err, ErrUnknownUser) {
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
	if _, err := LookupUser(name); !errors.Is(err, ErrUnknownUser) {
		t.Fatalf("right after userdel: %v", err)
	}
}

// A caller that changes the groups it got (the files manager appends the
// primary group) does not change what the next caller gets.
func TestCredentialNotShared(t *testing.T) {
	nobody, err := LookupUser("nobody")
	if err != nil {
		t.Skip("no user nobody on this machine")
	}
	var want []uint32
	for i := range 3 {
		got, err := Credential(nobody)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Groups) == 0 {
			t.Skip("nobody is in no group here")
		}
		if i == 0 {
			want = slices.Clone(got.Groups)
		} else if !slices.Equal(got.Groups, want) {
			t.Fatalf("call %d: groups %v, want %v: the cached credential was changed through a caller's copy", i, got.Groups, want)
		}
		got.Groups[0] = 54321
		got.Groups = append(got.Groups, 12345)
	}
}

// BenchmarkAccountLookup is what resolving a command's named user costs:
// parsing the account files each time against the cache, which still
// stats them each time.
//
//	go test -run '^$' -bench AccountLookup ./internal/proc/
func BenchmarkAccountLookup(b *testing.B) {
	if _, err := user.Lookup("nobody"); err != nil {
		b.Skip("no user nobody on this machine")
	}
	for _, bc := range []struct {
		name   string
		lookup func(string) (*user.User, error)
		cred   func(*user.User) (*syscall.Credential, error)
	}{
		{"parse", lookupUncached, credentialUncached},
		{"cached", LookupUser, Credential},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				u, err := bc.lookup("nobody")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := bc.cred(u); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
