package client_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rayito/rayito-agent/client"
)

// nextEvent returns the watch's next event, failing the test on anything
// else.
func nextEvent(t testing.TB, ctx context.Context, w *client.Watch) client.FSEvent {
	t.Helper()
	ev, err := w.Next(ctx)
	if err != nil {
		t.Fatalf("next event: %v", err)
	}
	return ev
}

// eventsUntil reads events until one satisfies last, checking that seqs
// follow each other without a hole.
func eventsUntil(t testing.TB, ctx context.Context, w *client.Watch, last func(client.FSEvent) bool) []client.FSEvent {
	t.Helper()
	var evs []client.FSEvent
	for {
		ev := nextEvent(t, ctx, w)
		if want := w.Cursors()["events"]; ev.Seq != want {
			t.Fatalf("event seq %d after consuming up to %d: %+v", ev.Seq, want, ev)
		}
		evs = append(evs, ev)
		if last(ev) {
			return evs
		}
	}
}

func opPath(evs []client.FSEvent, dir string) []string {
	var out []string
	for _, ev := range evs {
		s := ev.Op + " " + strings.TrimPrefix(ev.Path, dir+"/")
		if ev.Dir {
			s += "/"
		}
		// A burst of writes to one file may be one event or several.
		if len(out) > 0 && out[len(out)-1] == s && ev.Op == "write" {
			continue
		}
		out = append(out, s)
	}
	return out
}

// TestWatchEvents: creating, writing, renaming and removing files and a
// directory give their events in order; Close ends the stream.
func TestWatchEvents(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{})
	ctx := ctxLong(t)
	dir := t.TempDir()
	w, err := c.Watch(ctx, dir, false)
	must(t, err)
	a, b := filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt")
	must(t, os.WriteFile(a, []byte("hello"), 0o644))
	must(t, os.Rename(a, b))
	must(t, os.Remove(b))
	must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "sub", "deep"), nil, 0o644)) // not recursive: unseen
	must(t, os.Chmod(filepath.Join(dir, "sub"), 0o700))
	evs := eventsUntil(t, ctx, w, func(ev client.FSEvent) bool { return ev.Op == "chmod" })
	got := strings.Join(opPath(evs, dir), ", ")
	want := "create a.txt, write a.txt, rename a.txt, create b.txt, remove b.txt, create sub/, chmod sub/"
	if got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}

	must(t, w.Close(ctx))
	if _, err := w.Next(ctx); err != io.EOF {
		t.Fatalf("next after close: %v, want io.EOF", err)
	}
	if e := w.End(); e == nil || e.Reason != client.ReasonClosed {
		t.Fatalf("end %+v, want reason closed", e)
	}
	must(t, w.Close(ctx)) // again: nothing to do
}

// TestWatchRecursiveMkdirP: `mkdir -p a/b/c && touch a/b/c/f` gives every
// directory and the file, each once, though the watch could only join the
// new directories after they were made.
func TestWatchRecursiveMkdirP(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{})
	ctx := ctxLong(t)
	dir := t.TempDir()
	w, err := c.Watch(ctx, dir, true)
	must(t, err)
	events := w.Events()
	r := run(t, c, client.ExecOptions{Argv: sh("cd " + dir + " && mkdir -p a/b/c && touch a/b/c/f && touch done")})
	if r.err != nil || r.status.ExitCode() != 0 {
		t.Fatalf("%v %v %s", r.status, r.err, r.stderr)
	}
	creates := map[string]int{}
	for ev := range events {
		if ev.Op == "create" {
			name := strings.TrimPrefix(ev.Path, dir+"/")
			if ev.Dir {
				name += "/"
			}
			creates[name]++
		}
		if ev.Path == filepath.Join(dir, "done") {
			break
		}
	}
	for _, name := range []string{"a/", "a/b/", "a/b/c/", "a/b/c/f"} {
		if creates[name] != 1 {
			t.Errorf("%d create events for %s; all: %v", creates[name], name, creates)
		}
	}
	must(t, w.Close(ctx))
	for range events { // the channel closes after the end
	}
	if len(w.Gaps()) != 0 {
		t.Fatalf("gaps %v", w.Gaps())
	}
}

// TestWatchReconnectMidBurst: the network drops twice while 3000 files
// are created; after the reconnects every create arrives once, with seqs
// in order and no gap.
func TestWatchReconnectMidBurst(t *testing.T) {
	t.Parallel()
	const files = 3000
	a := newAgent(t)
	proxy := newTCPProxy(t, a.http.Listener.Addr().String())
	var reconnects atomic.Int32
	c := dialURL(t, proxy.url(), client.Options{OnReconnect: func(uint64) { reconnects.Add(1) }})
	ctx := ctxLong(t)
	dir := t.TempDir()
	w, err := c.Watch(ctx, dir, true)
	must(t, err)
	p, err := c.Exec(ctx, client.ExecOptions{Argv: sh(fmt.Sprintf("cd %s && mkdir d && for i in $(seq 1 %d); do : > d/f$i; done", dir, files))})
	must(t, err)
	seen := map[string]int{}
	count := 0
	for len(seen) < files {
		ev := nextEvent(t, ctx, w)
		if want := w.Cursors()["events"]; ev.Seq != want {
			t.Fatalf("event seq %d after consuming up to %d", ev.Seq, want)
		}
		if ev.Op == "create" && strings.HasPrefix(filepath.Base(ev.Path), "f") {
			seen[filepath.Base(ev.Path)]++
		}
		count++
		if count == 500 || count == 2500 {
			proxy.cutAndWait(t, &reconnects)
		}
	}
	for i := 1; i <= files; i++ {
		if n := seen[fmt.Sprintf("f%d", i)]; n != 1 {
			t.Fatalf("f%d created %d times", i, n)
		}
	}
	if len(w.Gaps()) != 0 {
		t.Fatalf("gaps %v", w.Gaps())
	}
	if r := collect(ctx, p); r.err != nil || r.status.ExitCode() != 0 {
		t.Fatalf("%v %v", r.status, r.err)
	}
	if reconnects.Load() != 2 {
		t.Fatalf("%d reconnects, want 2", reconnects.Load())
	}
}

// TestWatchAttachFromCursor: a second client attaches to a watch after
// the first event it already has and continues from there; removing the
// watched directory ends the watch for both.
func TestWatchAttachFromCursor(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	c1, c2 := a.dial(t, client.Options{}), a.dial(t, client.Options{})
	ctx := ctxLong(t)
	dir := filepath.Join(t.TempDir(), "watched")
	must(t, os.Mkdir(dir, 0o755))
	w1, err := c1.Watch(ctx, dir, false)
	must(t, err)
	for _, name := range []string{"one", "two", "three"} {
		must(t, os.Mkdir(filepath.Join(dir, name), 0o755))
	}
	first := eventsUntil(t, ctx, w1, func(ev client.FSEvent) bool { return filepath.Base(ev.Path) == "three" })
	if len(first) != 3 {
		t.Fatalf("events %+v", first)
	}
	w2, err := c2.AttachWatch(ctx, client.AttachOptions{Stream: w1.Stream(), From: map[string]uint64{"events": first[0].Seq}})
	must(t, err)
	if ev := nextEvent(t, ctx, w2); ev != first[1] {
		t.Fatalf("attached from seq %d: first event %+v, want %+v", first[0].Seq, ev, first[1])
	}
	must(t, os.RemoveAll(dir))
	for _, w := range []*client.Watch{w1, w2} {
		var err error
		for err == nil {
			_, err = w.Next(ctx)
		}
		if err != io.EOF || w.End() == nil || w.End().Reason != client.ReasonClosed || w.End().Message == "" {
			t.Fatalf("after removing the directory: %v, end %+v", err, w.End())
		}
	}
	if _, err := c1.AttachWatch(ctx, client.AttachOptions{Stream: w1.Stream(), From: map[string]uint64{"events": 1 << 40}}); !client.HasCode(err, client.CodeBadRequest) {
		t.Fatalf("attach beyond the end: %v, want bad_request", err)
	}
}

// TestWatchBadPaths: paths that cannot be watched get the documented
// error codes.
func TestWatchBadPaths(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	c := a.dial(t, client.Options{})
	ctx := ctxLong(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	must(t, os.WriteFile(file, nil, 0o644))
	for _, tc := range []struct {
		path string
		code client.Code
	}{
		{"relative/dir", client.CodeBadRequest},
		{"", client.CodeBadRequest},
		{file, client.CodeBadRequest},
		{filepath.Join(dir, "missing"), client.CodeNotFound},
	} {
		if _, err := c.Watch(ctx, tc.path, true); !client.HasCode(err, tc.code) {
			t.Errorf("watch %q: %v, want %s", tc.path, err, tc.code)
		}
	}
	p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"true"}})
	must(t, err)
	other := a.dial(t, client.Options{})
	if _, err := other.AttachWatch(ctx, client.AttachOptions{Stream: p.Stream()}); err == nil || !strings.Contains(err.Error(), "not a watch") {
		t.Errorf("AttachWatch of a process: %v", err)
	}
}
