package files

import "testing"

// Privileged: root always; a member of the admin group (here nogroup,
// nobody's primary group) when one is set; nobody else.
func TestPrivileged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		group, user string
		want        bool
	}{
		{"", "root", true},
		{"", "nobody", false},
		{"nogroup", "nobody", true},
		{"nogroup", "root", true},
		{"no-such-group", "nobody", false},
		{"root", "nobody", false},
	} {
		m, err := New(Options{AdminGroup: tc.group})
		if err != nil {
			t.Fatal(err)
		}
		u, err := m.User(tc.user)
		if err != nil {
			t.Skipf("no user %s", tc.user)
		}
		if got := m.Privileged(u); got != tc.want {
			t.Errorf("admin group %q, user %s: privileged %v, want %v", tc.group, tc.user, got, tc.want)
		}
		m.Close()
	}
}
