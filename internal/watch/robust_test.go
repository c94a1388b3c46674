package watch

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rayito/rayito-agent/internal/wire"
)

// inotifyFDOf finds the inotify descriptor that watches dir (its inode is
// in the descriptor's /proc/self/fdinfo), so that parallel tests each find
// their own manager's.
func inotifyFDOf(t *testing.T, dir string) string {
	t.Helper()
	st, err := os.Stat(dir)
	must(t, err)
	want := fmt.Sprintf(" ino:%x ", st.Sys().(*syscall.Stat_t).Ino)
	for _, fd := range inotifyFDs(t) {
		if b, err := os.ReadFile("/proc/self/fdinfo/" + fd); err == nil && strings.Contains(string(b), want) {
			return fd
		}
	}
	t.Fatalf("no inotify descriptor watches %s", dir)
	return ""
}

// TestSymlinkLoop: a path that is a symlink loop is a bad_request naming
// it, not an internal error.
func TestSymlinkLoop(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	must(t, os.Symlink(b, a))
	must(t, os.Symlink(a, b))
	for _, p := range []string{a, a + "/x"} {
		for _, recursive := range []bool{false, true} {
			s, err := m.Watch(p, recursive)
			if s != nil || wireCode(err) != wire.CodeBadRequest || !strings.Contains(err.Error(), "symbolic links") {
				t.Errorf("Watch(%s, %v) = %v, %v; want bad_request about symbolic links", p, recursive, s, err)
			}
		}
	}
	// A loop inside a recursive tree is an entry like any other.
	must(t, os.Mkdir(filepath.Join(dir, "tree"), 0o755))
	must(t, os.Symlink("..", filepath.Join(dir, "tree", "up")))
	c := attach(t, mustWatch(t, m, filepath.Join(dir, "tree"), true), 0)
	if got := c.sync(filepath.Join(dir, "tree"), filepath.Join(dir, "tree")); len(got) != 0 {
		t.Errorf("events before the marker: %v", got)
	}
	if n := m.InotifyWatches(); n != 1 {
		t.Errorf("%d inotify watches for one directory", n)
	}
}

// TestDeletedAndRecreated removes (or moves away) the watched directory,
// creates it again
// at once and watches it again: the old watch ends, the new one
// reports changes in the new directory, and after unwatch the kernel holds
// no inotify watch for it. Repeated, since the agent may not yet have read the
// old directory's removal when the new watch is asked for.
func TestDeletedAndRecreated(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	parent := t.TempDir()
	dir := filepath.Join(parent, "d")
	// The parent's watch reports the removal too, late, from its own
	// inotify watch: that report must not end the new watch.
	mustWatch(t, m, parent, false)
	for i := range 30 {
		must(t, os.Mkdir(dir, 0o755))
		old := attach(t, mustWatch(t, m, dir, i%2 == 0), 0)
		moved := i%4 >= 2
		if moved {
			must(t, os.Rename(dir, filepath.Join(parent, fmt.Sprintf("away%d", i))))
		} else {
			must(t, os.Remove(dir))
		}
		must(t, os.Mkdir(dir, 0o755))
		s := mustWatch(t, m, dir, i%2 == 0)
		fd := inotifyFDOf(t, dir)
		c := attach(t, s, 0)
		touch(t, filepath.Join(dir, "f"))
		got := c.sync(dir, dir)
		if want := []string{"create " + dir + "/f file"}; strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("round %d: the new watch saw %v, want %v", i, got, want)
		}
		for {
			if _, ok := old.next(); !ok {
				break
			}
		}
		// Removed, or moved: the agent may see either first.
		if e := old.end.End; e.Message != msgRemoved && !(moved && e.Message == msgMoved) {
			t.Fatalf("round %d: the old watch ended with %+v", i, e)
		}
		must(t, m.Unwatch(s.ID))
		m.Nodes() // the lock: no event is being handled
		if n, k := m.InotifyWatches(), kernelWatches(t, fd); n != 1 || k != 1 {
			t.Fatalf("round %d: after unwatch fsnotify holds %d watches, the kernel %d; want the parent's only", i, n, k)
		}
		must(t, os.RemoveAll(dir))
	}
}
