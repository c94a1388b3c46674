package watch

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

// TestOverlappingWatches puts several watches on overlapping trees: each
// sees exactly the events of its own tree, once, and the directories are
// watched once however many watches share them.
func TestOverlappingWatches(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	root := t.TempDir()
	a := filepath.Join(root, "a")
	must(t, os.MkdirAll(filepath.Join(a, "b"), 0o755))
	s1 := mustWatch(t, m, root, true)
	s2 := mustWatch(t, m, root, true)
	s3 := mustWatch(t, m, a, true)
	s4 := mustWatch(t, m, a, false)
	clients := []*client{attach(t, s1, 0), attach(t, s2, 0), attach(t, s3, 0), attach(t, s4, 0)}

	touch(t, filepath.Join(root, "f"))
	touch(t, filepath.Join(a, "f"))
	touch(t, filepath.Join(a, "b", "f"))
	must(t, os.Mkdir(filepath.Join(a, "n"), 0o755))
	touch(t, filepath.Join(a, "n", "g"))

	whole := []string{
		"create " + root + "/f file", "create " + a + "/f file", "create " + a + "/b/f file",
		"create " + a + "/n dir", "create " + a + "/n/g file",
	}
	want := [][]string{whole, whole, whole[1:], {whole[1], whole[3]}}
	syncAll(t, a, clients, want)
	if n := m.InotifyWatches(); n != 4 {
		t.Errorf("%d inotify watches for 4 directories", n)
	}

	must(t, m.Unwatch(s1.ID))
	if n := m.InotifyWatches(); n != 4 {
		t.Errorf("%d inotify watches after unwatching one of two watches of the tree, want 4", n)
	}
	must(t, m.Unwatch(s2.ID))
	if n := m.InotifyWatches(); n != 3 {
		t.Errorf("%d inotify watches after unwatching the root, want 3", n)
	}
	touch(t, filepath.Join(a, "b", "g"))
	syncAll(t, a, clients[2:], [][]string{{"create " + a + "/b/g file"}, nil})
	must(t, m.Unwatch(s3.ID))
	if n := m.InotifyWatches(); n != 1 {
		t.Errorf("%d inotify watches with only a plain watch left, want 1", n)
	}
	must(t, m.Unwatch(s4.ID))
	if n := m.InotifyWatches(); n != 0 {
		t.Errorf("%d inotify watches with no watch left", n)
	}
}

// syncAll creates one marker in dir and checks what each client saw before it.
func syncAll(t *testing.T, dir string, clients []*client, want [][]string) {
	t.Helper()
	marker := filepath.Join(dir, "marker-"+time.Now().Format("150405.000000000"))
	touch(t, marker)
	for i, c := range clients {
		got := c.until(func(e fsEvent) bool { return e.Path == marker })
		if d := describe(got[:len(got)-1]); !slices.Equal(d, want[i]) {
			t.Errorf("watch %d saw\n %v\nwant\n %v", i, d, want[i])
		}
	}
}

// TestNoLeakAfterCycles watches and unwatches overlapping trees 1,000
// times next to a long-lived watch: afterwards the kernel holds exactly the
// long-lived watch's inotify watches, which still work. Not parallel, so
// that the inotify descriptor it finds is its own.
func TestNoLeakAfterCycles(t *testing.T) {
	before := inotifyFDs(t)
	m, _ := newManager(t)
	root := t.TempDir()
	a := filepath.Join(root, "a")
	must(t, os.MkdirAll(filepath.Join(a, "b"), 0o755))
	keep := mustWatch(t, m, a, true) // opens the manager's instance
	c := attach(t, keep, 0)
	var fd string
	for _, f := range inotifyFDs(t) {
		if !slices.Contains(before, f) {
			fd = f
		}
	}
	if fd == "" {
		t.Fatal("no new inotify descriptor in /proc/self/fd")
	}

	for range 1000 {
		ids := []uint64{
			mustWatch(t, m, root, true).ID,
			mustWatch(t, m, a, false).ID,
			mustWatch(t, m, filepath.Join(a, "b"), true).ID,
		}
		for _, id := range ids {
			must(t, m.Unwatch(id))
		}
	}
	if n, k := m.InotifyWatches(), kernelWatches(t, fd); n != 2 || k != 2 {
		t.Errorf("after 1,000 cycles: fsnotify holds %d watches, the kernel %d; want 2", n, k)
	}
	touch(t, filepath.Join(a, "b", "f"))
	if got := c.sync(a, a); !slices.Equal(got, []string{"create " + a + "/b/f file"}) {
		t.Errorf("the long-lived watch saw %v", got)
	}
	must(t, m.Unwatch(keep.ID))
	if n, k := m.InotifyWatches(), kernelWatches(t, fd); n != 0 || k != 0 {
		t.Errorf("after the last unwatch: fsnotify holds %d watches, the kernel %d", n, k)
	}
}

// inotifyFDs lists this process's inotify descriptors.
func inotifyFDs(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	must(t, err)
	var fds []string
	for _, e := range entries {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == "anon_inode:inotify" {
			fds = append(fds, e.Name())
		}
	}
	return fds
}

// kernelWatches counts the watches the kernel lists for an inotify fd.
func kernelWatches(t *testing.T, fd string) int {
	t.Helper()
	f, err := os.Open("/proc/self/fdinfo/" + fd)
	must(t, err)
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "inotify wd:") {
			n++
		}
	}
	return n
}

// TestCloseStopsGoroutines checks that no goroutine of this package or of
// fsnotify outlives Close. Not parallel, so that other tests' managers do
// not count.
func TestCloseStopsGoroutines(t *testing.T) {
	reg := stream.NewRegistry(0)
	defer reg.Close()
	m := NewManager(reg, nil)
	root := t.TempDir()
	s, err := m.Watch(root, true)
	must(t, err)
	c := attach(t, s, 0)
	must(t, os.Mkdir(filepath.Join(root, "d"), 0o755))
	c.sync(root, root)
	if stacks := ours(); stacks == "" {
		t.Fatal("no goroutine of the manager found before Close; the check below cannot work")
	}
	must(t, m.Close())
	// A goroutine whose deferred Done let Close return may not have
	// finished its last instruction yet: give it a moment to be gone.
	stacks := ours()
	for deadline := time.Now().Add(5 * time.Second); stacks != "" && time.Now().Before(deadline); stacks = ours() {
		time.Sleep(10 * time.Millisecond)
	}
	if stacks != "" {
		t.Errorf("goroutines left after Close:\n%s", stacks)
	}
}

// ours returns the stacks of goroutines running this package's or
// fsnotify's code, other than the caller.
func ours() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var left []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "watch.ours") {
			continue
		}
		if strings.Contains(g, "internal/watch.(*Manager)") || strings.Contains(g, "fsnotify") {
			left = append(left, g)
		}
	}
	return strings.Join(left, "\n\n")
}
