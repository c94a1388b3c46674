package watch

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rayito/rayito-agent/internal/stream"
)

// TestRootGone removes or moves the watched directory: the watch ends with
// reason closed, and a watch on its parent sees the change exactly once.
func TestRootGone(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"remove", "rename"} {
		for _, parentWatched := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s parent watched %v", op, parentWatched), func(t *testing.T) {
				t.Parallel()
				m, _ := newManager(t)
				parent := t.TempDir()
				root := filepath.Join(parent, "root")
				must(t, os.MkdirAll(filepath.Join(root, "a", "b"), 0o755))
				touch(t, filepath.Join(root, "a", "b", "f"))
				var pc *client
				if parentWatched {
					pc = attach(t, mustWatch(t, m, parent, false), 0)
				}
				c := attach(t, mustWatch(t, m, root, true), 0)

				if op == "remove" {
					must(t, os.RemoveAll(root))
				} else {
					must(t, os.Rename(root, filepath.Join(t.TempDir(), "moved")))
				}
				for {
					if _, ok := c.next(); !ok {
						break
					}
				}
				if e := c.end.End; e.Reason != stream.ReasonClosed || e.Message == "" {
					t.Errorf("end %+v, want reason closed with a message", e)
				}
				want := 0
				if parentWatched {
					want = 1
					if got := pc.sync(parent, parent); !slices.Equal(got, []string{op + " " + root + " dir"}) {
						t.Errorf("parent watch saw %v", got)
					}
				}
				m.Nodes() // waits for the event being handled
				if n := m.InotifyWatches(); n != want {
					t.Errorf("%d inotify watches left, want %d", n, want)
				}
			})
		}
	}
}

// TestReattach reads part of a stream, disconnects, lets events arrive with
// no client attached, and reattaches from the last seq: every event comes
// exactly once, in seq order.
func TestReattach(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	root := t.TempDir()
	s := mustWatch(t, m, root, true)
	const total = 200
	name := func(i int) string { return filepath.Join(root, fmt.Sprintf("f%03d", i)) }

	first := attach(t, s, 0)
	for i := range total / 2 {
		touch(t, name(i))
	}
	seen := map[string]int{}
	for range total / 4 {
		ev, _ := first.next()
		seen[ev.Path]++
	}
	first.a.Close()
	for i := total / 2; i < total; i++ {
		touch(t, name(i))
	}

	second := attach(t, s, first.last)
	for _, ev := range second.until(func(e fsEvent) bool { return e.Path == name(total-1) }) {
		seen[ev.Path]++
	}
	if len(second.gaps) != 0 {
		t.Errorf("gaps after reattach: %v", second.gaps)
	}
	for i := range total {
		if seen[name(i)] != 1 {
			t.Errorf("%s reported %d times", name(i), seen[name(i)])
		}
	}
	if len(seen) != total {
		t.Errorf("%d paths reported, want %d", len(seen), total)
	}
}

// TestInotifyStartsAtFirstWatch: a manager holds no inotify instance
// until it is asked for a watch, then one for all its watches, and none
// after Close. (Not parallel: it counts the process's instances.)
func TestInotifyStartsAtFirstWatch(t *testing.T) {
	before := len(inotifyFDs(t))
	m, _ := newManager(t)
	if n := len(inotifyFDs(t)); n != before {
		t.Fatalf("a new manager opened %d inotify instances", n-before)
	}
	mustWatch(t, m, t.TempDir(), true)
	mustWatch(t, m, t.TempDir(), false)
	if n := len(inotifyFDs(t)); n != before+1 {
		t.Fatalf("two watches hold %d inotify instances, want 1", n-before)
	}
	must(t, m.Close())
	if n := len(inotifyFDs(t)); n != before {
		t.Fatalf("%d inotify instances left after Close", n-before)
	}
	if _, err := m.Watch(t.TempDir(), false); err == nil {
		t.Fatal("Watch after Close succeeded")
	}
}
