package watch

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBurst creates 10,000 files as fast as it can while a client reads:
// every file is reported exactly once, or the loss is announced.
func TestBurst(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	root := t.TempDir()
	c := attach(t, mustWatch(t, m, root, true), 0)
	const files = 10000
	name := func(i int) string { return filepath.Join(root, fmt.Sprintf("f%05d", i)) }
	go func() {
		for i := range files {
			if f, err := os.Create(name(i)); err == nil {
				f.Close()
			}
		}
	}()
	seen := map[string]int{}
	overflow := false
	for len(seen) < files && !overflow && len(c.gaps) == 0 {
		ev, _ := c.next()
		switch {
		case ev.Op == "overflow":
			overflow = true
		case ev.Op == "create":
			seen[ev.Path]++
		default:
			t.Fatalf("unexpected event %s", ev)
		}
	}
	for p, n := range seen {
		if n != 1 {
			t.Errorf("%s reported %d times", p, n)
		}
	}
	if len(seen) < files {
		t.Logf("%d of %d files reported before the loss was announced (overflow %v, gaps %v)",
			len(seen), files, overflow, c.gaps)
	}
}

// TestKernelOverflow stalls the manager until the kernel's inotify queue
// overflows: every watch gets an overflow event, and the rescan that
// follows finds (and watches) a directory whose create was lost.
func TestKernelOverflow(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	root := t.TempDir()
	c := attach(t, mustWatch(t, m, root, true), 0)
	plain := attach(t, mustWatch(t, m, root, false), 0)

	queue := maxQueuedEvents(t)
	resume := m.Stall()
	// The queue, plus one read's worth held by fsnotify, plus margin.
	for i := range queue + 4096 + 1000 {
		touch(t, filepath.Join(root, "f"+strconv.Itoa(i)))
	}
	late := filepath.Join(root, "late")
	must(t, os.Mkdir(late, 0o755))
	touch(t, filepath.Join(late, "x"))
	resume()

	for _, cl := range []*client{c, plain} {
		cl.until(func(e fsEvent) bool { return e.Op == "overflow" && e.Path == root && e.Dir })
	}
	got := strings.Join(c.sync(root, root), "\n")
	for _, want := range []string{"create " + late + " dir", "create " + late + "/x file"} {
		if !strings.Contains(got, want) {
			t.Errorf("after the overflow, no %q in\n%s", want, got)
		}
	}
	appendTo(t, filepath.Join(late, "x"), "z")
	got = strings.Join(c.sync(root, root), "\n")
	if want := "write " + late + "/x file"; !strings.Contains(got, want) {
		t.Errorf("the directory found by the rescan is not watched: no %q in\n%s", want, got)
	}
}

func maxQueuedEvents(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	must(t, err)
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	must(t, err)
	return n
}

// TestBufferOverflow lets 12,000 events arrive with nobody attached, more
// than a stream keeps: a client attaching from the start gets a gap for the
// dropped events, then an overflow event among the rest; together they
// account for every file.
func TestBufferOverflow(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	root := t.TempDir()
	s := mustWatch(t, m, root, false)
	const files = 12000 // fewer than the kernel queue holds, so none lost there
	for i := range files {
		touch(t, filepath.Join(root, fmt.Sprintf("f%05d", i)))
	}
	// files creates and one overflow event.
	log := s.Log(Channel)
	deadline := time.Now().Add(waitFor)
	for log.Stats().End < files+1 {
		if time.Now().After(deadline) {
			t.Fatalf("stream stuck at %+v", log.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}

	c := attach(t, s, 0)
	last := filepath.Join(root, fmt.Sprintf("f%05d", files-1))
	evs := c.until(func(e fsEvent) bool { return e.Path == last })
	if len(c.gaps) != 1 || c.gaps[0][0] != 1 {
		t.Fatalf("gaps %v, want one from seq 1", c.gaps)
	}
	creates, overflows := map[string]bool{}, 0
	for _, e := range evs {
		switch {
		case e.Op == "overflow" && e.Path == root && e.Dir:
			overflows++
		case e.Op == "create" && !creates[e.Path]:
			creates[e.Path] = true
		default:
			t.Fatalf("unexpected event %s", e)
		}
	}
	lost := int(c.gaps[0][1] - c.gaps[0][0])
	if overflows != 1 || len(creates)+lost != files {
		t.Errorf("%d creates + %d lost in the gap != %d files; %d overflow events, want 1",
			len(creates), lost, files, overflows)
	}
	if st := log.Stats(); st.Lost != uint64(lost) {
		t.Errorf("log lost %d, gap announced %d", st.Lost, lost)
	}
}
