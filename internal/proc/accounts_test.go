package proc

import (
	"os/user"
	"slices"
	"syscall"
	"testing"
)

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
