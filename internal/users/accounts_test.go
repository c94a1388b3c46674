package users

import (
	"errors"
	"os"
	"slices"
	"testing"
)

// A caller that changes the groups of the credential it got does not
// change what the next caller gets.
func TestLookupNotShared(t *testing.T) {
	a := New()
	var want []uint32
	for i := range 3 {
		got, err := a.Lookup("nobody")
		if err != nil {
			t.Skip("no user nobody on this machine")
		}
		if i == 0 {
			want = slices.Clone(got.Groups)
		} else if !slices.Equal(got.Groups, want) {
			t.Fatalf("call %d: groups %v, want %v: the cached account was changed through a caller's copy", i, got.Groups, want)
		}
		cred := got.Credential()
		cred.Groups[0] = 54321
		cred.Groups = append(cred.Groups, 12345)
	}
}

// The agent's own user is "", found by its uid too; an unknown name or
// number is ErrUnknown; the primary group is among the groups; ids get
// names, and an id no account has is its number.
func TestLookup(t *testing.T) {
	a := New()
	own, err := a.Lookup("")
	if err != nil || own.UID != uint32(os.Getuid()) || !own.IsAgent() || !slices.Contains(own.Groups, own.GID) {
		t.Fatalf("own user: %+v %v", own, err)
	}
	if byID, err := a.Lookup(own.Name); err != nil || byID.UID != own.UID {
		t.Fatalf("by name %q: %+v %v", own.Name, byID, err)
	}
	for _, bad := range []string{"no-such-user-here", "4294967290"} {
		if _, err := a.Lookup(bad); !errors.Is(err, ErrUnknown) {
			t.Errorf("%q: %v, want ErrUnknown", bad, err)
		}
	}
	if got := a.OwnerName(own.UID); got != own.Name {
		t.Errorf("owner of uid %d: %q", own.UID, got)
	}
	if got := a.OwnerName(4294967290); got != "4294967290" {
		t.Errorf("owner of an unused uid: %q", got)
	}
	if uid, err := a.UID(own.Name); err != nil || uid != own.UID {
		t.Errorf("UID(%q): %d %v", own.Name, uid, err)
	}
	if _, err := a.GID("no-such-group-here"); !errors.Is(err, ErrUnknown) {
		t.Errorf("an unknown group: %v", err)
	}
}

// BenchmarkLookup is what resolving a command's named user costs:
// parsing the account files each time against the cache, which still
// stats them each time.
//
//	go test -run '^$' -bench Lookup ./internal/users/
func BenchmarkLookup(b *testing.B) {
	if _, err := find("nobody"); err != nil {
		b.Skip("no user nobody on this machine")
	}
	a := New()
	for _, bc := range []struct {
		name   string
		lookup func(string) (Account, error)
	}{{"parse", find}, {"cached", a.Lookup}} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				if _, err := bc.lookup("nobody"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
