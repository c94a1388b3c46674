package files

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMkdirForAUserWhoSwapsTheName: the agent makes a directory and
// gives it to a user (MakeDirFor); a program of the user's that swaps
// the new name for a symlink to a directory of root's between the two
// steps gets an error, not root's directory.
func TestMkdirForAUserWhoSwapsTheName(t *testing.T) {
	needRoot(t)
	m, _ := newManager(t)
	nobody, err := m.User("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	dir := t.TempDir()
	precious := filepath.Join(dir, "etc")
	if err := os.Mkdir(precious, 0o755); err != nil {
		t.Fatal(err)
	}
	afterMkdirAt = func(d dirFD, name string) {
		if err := unix.Unlinkat(int(d), name, unix.AT_REMOVEDIR); err != nil {
			t.Error(err)
		}
		if err := unix.Symlinkat(precious, int(d), name); err != nil {
			t.Error(err)
		}
	}
	defer func() { afterMkdirAt = nil }()
	for _, parents := range []bool{false, true} {
		p := filepath.Join(dir, "new")
		if parents {
			p = filepath.Join(dir, "a", "b")
		}
		err := m.MakeDirFor("", p, parents, &nobody)
		st, serr := os.Stat(precious)
		if serr != nil {
			t.Fatal(serr)
		}
		if uid := st.Sys().(*syscall.Stat_t).Uid; uid != 0 {
			t.Fatalf("mkdir (parents %v) gave the symlink's target to uid %d (err %v)", parents, uid, err)
		}
		if err == nil {
			t.Fatalf("mkdir (parents %v) succeeded though its directory was swapped for a symlink", parents)
		}
	}
}
