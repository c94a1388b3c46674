package watch

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEvents makes every kind of change in a watched directory, flat and
// five levels down, and checks the exact events, in order, without
// duplicates.
func TestEvents(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		depth     int
		recursive bool
	}{
		{"flat", 0, false},
		{"flat recursive", 0, true},
		{"5 levels", 5, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, _ := newManager(t)
			root := t.TempDir()
			dir := root
			for i := 1; i <= tt.depth; i++ {
				dir = filepath.Join(dir, "d"+string(rune('0'+i)))
			}
			must(t, os.MkdirAll(dir, 0o755))
			c := attach(t, mustWatch(t, m, root, tt.recursive), 0)

			p := func(name string) string { return filepath.Join(dir, name) }
			must(t, os.WriteFile(p("f"), []byte("x"), 0o644))
			must(t, os.Chmod(p("f"), 0o600))
			must(t, os.Rename(p("f"), p("g")))
			must(t, os.Mkdir(p("sub"), 0o755))
			// The agent learns that sub is a directory (and watches it) when
			// it reads the create; a client making changes at human pace
			// never races that.
			got := c.sync(root, root)
			must(t, os.Chmod(p("sub"), 0o700))
			must(t, os.WriteFile(p("sub/h"), []byte("y"), 0o644))
			must(t, os.Remove(p("sub/h")))
			must(t, os.Remove(p("sub")))
			must(t, os.Remove(p("g")))

			want := []string{
				"create " + p("f") + " file",
				"write " + p("f") + " file",
				"chmod " + p("f") + " file",
				"rename " + p("f") + " file",
				"create " + p("g") + " file",
				"create " + p("sub") + " dir",
				"chmod " + p("sub") + " dir",
			}
			if tt.recursive {
				want = append(want,
					"create "+p("sub/h")+" file",
					"write "+p("sub/h")+" file",
					"remove "+p("sub/h")+" file")
			}
			want = append(want,
				"remove "+p("sub")+" dir",
				"remove "+p("g")+" file")
			if tt.depth > 0 && !tt.recursive {
				want = nil
			}
			got = append(got, c.sync(root, root)...)
			if !slices.Equal(got, want) {
				t.Errorf("events:\n got  %s\n want %s", strings.Join(got, "\n      "), strings.Join(want, "\n      "))
			}
		})
	}
}

// TestNonRecursiveSeesChildrenOnly checks that a plain watch reports its
// direct children, directories included, and nothing below them.
func TestNonRecursiveSeesChildrenOnly(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	root := t.TempDir()
	must(t, os.Mkdir(filepath.Join(root, "old"), 0o755))
	c := attach(t, mustWatch(t, m, root, false), 0)

	touch(t, filepath.Join(root, "old", "deep"))
	must(t, os.MkdirAll(filepath.Join(root, "new", "x"), 0o755))
	touch(t, filepath.Join(root, "new", "x", "deeper"))
	must(t, os.Chmod(filepath.Join(root, "old"), 0o700))
	must(t, os.RemoveAll(filepath.Join(root, "old")))

	got := c.sync(root, root)
	want := []string{
		"create " + root + "/new dir",
		"chmod " + root + "/old dir",
		"remove " + root + "/old dir",
	}
	if !slices.Equal(got, want) {
		t.Errorf("events:\n got  %v\n want %v", got, want)
	}
	if n := m.InotifyWatches(); n != 1 {
		t.Errorf("a plain watch holds %d inotify watches, want 1", n)
	}
}

// TestMkdirRace writes down the race of recursive watches: directories and
// files created faster than the watch can follow (mkdir -p a/b/c && touch
// a/b/c/f) are all reported, each exactly once, and the new directories
// are watched afterwards.
func TestMkdirRace(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	root := t.TempDir()
	c := attach(t, mustWatch(t, m, root, true), 0)

	const rounds = 50
	var want []string
	for i := range rounds {
		a := filepath.Join(root, "a"+itoa(i))
		must(t, os.MkdirAll(filepath.Join(a, "b", "c"), 0o755))
		touch(t, filepath.Join(a, "b", "c", "f"))
		want = append(want,
			"create "+a+" dir", "create "+a+"/b dir", "create "+a+"/b/c dir", "create "+a+"/b/c/f file")
	}
	got := c.sync(root, root)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("events:\n got  %v\n want %v", got, want)
	}

	// Every c is watched now: writing into it is seen.
	want = want[:0]
	for i := range rounds {
		f := filepath.Join(root, "a"+itoa(i), "b", "c", "f")
		appendTo(t, f, "z")
		want = append(want, "write "+f+" file")
	}
	if got := c.sync(root, root); !slices.Equal(got, want) {
		t.Fatalf("writes:\n got  %v\n want %v", got, want)
	}
	if n, dirs := m.InotifyWatches(), 1+3*rounds; n != dirs {
		t.Errorf("%d inotify watches for %d directories", n, dirs)
	}
}

// TestNewDirectoryWatchedWhenReported: a new directory's create is
// reported only once the directory is watched, so a client that writes
// into it on seeing the report (as envd's SDK users do) sees its write as
// a create and a write, however slow the agent is to add the watch.
func TestNewDirectoryWatchedWhenReported(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	m.beforeGrow = func(string) { time.Sleep(100 * time.Millisecond) }
	root := t.TempDir()
	c := attach(t, mustWatch(t, m, root, true), 0)
	sub := filepath.Join(root, "sub")
	must(t, os.Mkdir(sub, 0o755))
	if got := describe(c.until(func(e fsEvent) bool { return e.Path == sub })); !slices.Equal(got, []string{"create " + sub + " dir"}) {
		t.Fatalf("events %v", got)
	}
	f := filepath.Join(sub, "f")
	must(t, os.WriteFile(f, []byte("x"), 0o644))
	want := []string{"create " + f + " file", "write " + f + " file"}
	if got := c.sync(root, root); !slices.Equal(got, want) {
		t.Fatalf("writing into a directory once its create is reported:\n got  %v\n want %v", got, want)
	}
}

// TestDirectoryRename moves a directory inside the tree and then out of
// it: the rename is reported once, the moved tree is reported under its
// new name and watched there, and nothing stays watched after it left.
func TestDirectoryRename(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	root, outside := t.TempDir(), t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "a", "x"), 0o755))
	touch(t, filepath.Join(root, "a", "x", "f"))
	c := attach(t, mustWatch(t, m, root, true), 0)

	must(t, os.Rename(filepath.Join(root, "a"), filepath.Join(root, "b")))
	got := c.sync(root, root)
	appendTo(t, filepath.Join(root, "b", "x", "f"), "1")
	got = append(got, c.sync(root, root)...)
	want := []string{
		"rename " + root + "/a dir",
		"create " + root + "/b dir",
		"create " + root + "/b/x dir",
		"create " + root + "/b/x/f file",
		"write " + root + "/b/x/f file",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rename inside the tree:\n got  %v\n want %v", got, want)
	}
	if n := m.InotifyWatches(); n != 3 {
		t.Errorf("%d inotify watches after the rename, want 3", n)
	}

	must(t, os.Rename(filepath.Join(root, "b"), filepath.Join(outside, "b")))
	appendTo(t, filepath.Join(outside, "b", "x", "f"), "2")
	got = c.sync(root, root)
	if want := []string{"rename " + root + "/b dir"}; !slices.Equal(got, want) {
		t.Fatalf("rename out of the tree:\n got  %v\n want %v", got, want)
	}
	if n := m.InotifyWatches(); n != 1 {
		t.Errorf("%d inotify watches after the tree left, want 1", n)
	}
}

// TestSymlinkedRoot watches a directory through a symlink: events name
// paths under the path the client asked for.
func TestSymlinkedRoot(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	real, links := t.TempDir(), t.TempDir()
	link := filepath.Join(links, "link")
	must(t, os.Symlink(real, link))
	c := attach(t, mustWatch(t, m, link+"/./", true), 0)

	must(t, os.Mkdir(filepath.Join(real, "d"), 0o755))
	touch(t, filepath.Join(real, "d", "f"))
	got := c.sync(real, link)
	want := []string{"create " + link + "/d dir", "create " + link + "/d/f file"}
	if !slices.Equal(got, want) {
		t.Errorf("events:\n got  %v\n want %v", got, want)
	}
}

func itoa(i int) string { return fmt.Sprintf("%02d", i) }
