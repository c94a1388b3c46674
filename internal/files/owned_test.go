package files

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Privileged: root always; a member of any admin group (here nogroup,
// nobody's primary group) when one is set; nobody else.
func TestPrivileged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		groups []string
		user   string
		want   bool
	}{
		{nil, "root", true},
		{nil, "nobody", false},
		{[]string{"nogroup"}, "nobody", true},
		{[]string{"nogroup"}, "root", true},
		{[]string{"no-such-group"}, "nobody", false},
		{[]string{"root"}, "nobody", false},
		// wheel, absent here (Debian has sudo), and then one nobody is in.
		{[]string{"wheel", "nogroup"}, "nobody", true},
		{[]string{"sudo", "wheel"}, "nobody", false},
	} {
		m, err := New(Options{AdminGroups: tc.groups})
		if err != nil {
			t.Fatal(err)
		}
		u, err := m.User(tc.user)
		if err != nil {
			t.Skipf("no user %s", tc.user)
		}
		if got := m.Privileged(u); got != tc.want {
			t.Errorf("admin groups %q, user %s: privileged %v, want %v", tc.groups, tc.user, got, tc.want)
		}
		m.Close()
	}
}

// TestPrivilegedThroughWheel: on an image that gives the right to become
// root through wheel (Fedora, Alpine, Arch) rather than sudo, a member of
// wheel is privileged with the agent's default groups (sudo and wheel).
// The test lends this machine such a group: /etc/group with wheel, nobody
// in it, bind-mounted in a mount namespace of the test's own thread.
func TestPrivilegedThroughWheel(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to mount")
	}
	orig, err := os.ReadFile("/etc/group")
	if err != nil {
		t.Fatal(err)
	}
	withWheel := filepath.Join(t.TempDir(), "group")
	if err := os.WriteFile(withWheel, append(orig, []byte("wheel:x:4242:nobody\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	errs := make(chan string, 4)
	go func() {
		defer close(errs)
		runtime.LockOSThread() // never unlocked: the thread ends with its namespace
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			errs <- "skip: " + err.Error()
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			errs <- "skip: " + err.Error()
			return
		}
		if err := unix.Mount(withWheel, "/etc/group", "", unix.MS_BIND, ""); err != nil {
			errs <- "skip: " + err.Error()
			return
		}
		for _, tc := range []struct {
			groups []string
			want   bool
		}{{[]string{"sudo", "wheel"}, true}, {[]string{"sudo"}, false}} {
			m, err := New(Options{AdminGroups: tc.groups})
			if err != nil {
				errs <- err.Error()
				return
			}
			u, err := m.User("nobody")
			if err != nil {
				errs <- "skip: no user nobody"
				m.Close()
				return
			}
			if got := m.Privileged(u); got != tc.want {
				errs <- fmt.Sprintf("admin groups %q, nobody in wheel: privileged %v, want %v", tc.groups, got, tc.want)
			}
			m.Close()
		}
	}()
	for e := range errs {
		if strings.HasPrefix(e, "skip: ") {
			t.Skip(e)
		}
		t.Error(e)
	}
}
