package envdapi_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rayito/rayito-agent/internal/envdapi/gen/filesystem"
	"github.com/rayito/rayito-agent/internal/stream"
)

type fsEvent struct {
	name string
	typ  filesystem.EventType
}

// watchDir starts a watch and returns its stream after the start event.
func watchDir(t *testing.T, ctx context.Context, a *agent, req *filesystem.WatchDirRequest) *connect.ServerStreamForClient[filesystem.WatchDirResponse] {
	t.Helper()
	w, err := a.fs.WatchDir(ctx, authed(connect.NewRequest(req)))
	if err != nil {
		t.Fatal(err)
	}
	if !w.Receive() || w.Msg().GetStart() == nil {
		t.Fatalf("first message %v, %v; want start", w.Msg(), w.Err())
	}
	return w
}

// WatchDir reports a tree's changes with the SDK's event types and names
// relative to the watched directory.
func TestWatchDir(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(ctxLong(t))
	defer cancel()
	w := watchDir(t, ctx, a, &filesystem.WatchDirRequest{Path: dir, Recursive: true})

	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "a"), nil, 0o644))
	must(os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	want := []fsEvent{
		{"a", filesystem.EventType_EVENT_TYPE_CREATE},
		{"sub", filesystem.EventType_EVENT_TYPE_CREATE},
		{"sub/b", filesystem.EventType_EVENT_TYPE_CREATE},
		{"sub/b", filesystem.EventType_EVENT_TYPE_WRITE},
		{"a", filesystem.EventType_EVENT_TYPE_RENAME},
		{"c", filesystem.EventType_EVENT_TYPE_CREATE},
		{"c", filesystem.EventType_EVENT_TYPE_CHMOD},
		{"c", filesystem.EventType_EVENT_TYPE_REMOVE},
	}
	seen := map[fsEvent]bool{}
	acted := false
	for !seen[want[len(want)-1]] {
		if !w.Receive() {
			t.Fatalf("watch ended: %v; seen %v", w.Err(), seen)
		}
		ev := w.Msg().GetFilesystem()
		if ev == nil {
			continue
		}
		seen[fsEvent{ev.GetName(), ev.GetType()}] = true
		if !acted && seen[fsEvent{"sub", filesystem.EventType_EVENT_TYPE_CREATE}] {
			// The subdirectory is watched once its create is reported.
			acted = true
			must(os.WriteFile(filepath.Join(dir, "sub", "b"), []byte("x"), 0o644))
			must(os.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "c")))
			must(os.Chmod(filepath.Join(dir, "c"), 0o600))
			must(os.Remove(filepath.Join(dir, "c")))
		}
	}
	for _, e := range want {
		if !seen[e] {
			t.Errorf("no %v of %q; seen %v", e.typ, e.name, seen)
		}
	}
	// The watch belongs to the call: it ends when the client goes away.
	cancel()
	for _, st := range a.streams.List(stream.KindWatch) {
		select {
		case <-st.Done():
		case <-ctxLong(t).Done():
			t.Fatal("the watch outlived its call")
		}
	}
}

func TestWatchDirErrors(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	for _, c := range []struct {
		path  string
		code  connect.Code
		words string
	}{
		{"", connect.CodeInvalidArgument, "path"},
		{"/no/such/dir", connect.CodeNotFound, "/no/such/dir"},
		{file, connect.CodeInvalidArgument, "not a directory"},
	} {
		w, err := a.fs.WatchDir(ctxLong(t), authed(connect.NewRequest(&filesystem.WatchDirRequest{Path: c.path})))
		if err == nil {
			for w.Receive() {
			}
			err = w.Err()
		}
		wantCode(t, err, c.code, c.words)
	}
	// Relative paths are in the user's home.
	home, _ := os.UserHomeDir()
	w, err := a.fs.WatchDir(ctxLong(t), authed(connect.NewRequest(&filesystem.WatchDirRequest{Path: "no-such-dir-of-rayito"})))
	if err == nil {
		for w.Receive() {
		}
		err = w.Err()
	}
	wantCode(t, err, connect.CodeNotFound, filepath.Join(home, "no-such-dir-of-rayito"))
	if n := len(a.streams.List(stream.KindWatch)); n != 0 {
		t.Fatalf("refused watches left %d streams", n)
	}
}

// A watch whose directory is removed ends with an error naming why.
func TestWatchDirRemoved(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	dir := filepath.Join(t.TempDir(), "gone")
	os.Mkdir(dir, 0o755)
	w := watchDir(t, ctxLong(t), a, &filesystem.WatchDirRequest{Path: dir})
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	for w.Receive() {
	}
	wantCode(t, w.Err(), connect.CodeAborted, "removed")
}

// A polled watcher hands out each event once, in order, until removed.
func TestPolledWatcher(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	dir := t.TempDir()
	ctx := ctxLong(t)
	created, err := a.fs.CreateWatcher(ctx, authed(connect.NewRequest(&filesystem.CreateWatcherRequest{Path: dir})))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWatcherId()
	poll := func() ([]fsEvent, error) {
		resp, err := a.fs.GetWatcherEvents(ctx, authed(connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: id})))
		if err != nil {
			return nil, err
		}
		var out []fsEvent
		for _, e := range resp.Msg.GetEvents() {
			out = append(out, fsEvent{e.GetName(), e.GetType()})
		}
		return out, nil
	}
	var got []fsEvent
	for i, name := range []string{"one", "two"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(waitLong); len(got) < i+1; time.Sleep(10 * time.Millisecond) {
			evs, err := poll()
			if err != nil || time.Now().After(deadline) {
				t.Fatalf("poll: %v %v", evs, err)
			}
			got = append(got, evs...)
		}
	}
	want := []fsEvent{{"one", filesystem.EventType_EVENT_TYPE_CREATE}, {"two", filesystem.EventType_EVENT_TYPE_CREATE}}
	if !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v once each", got, want)
	}
	if evs, err := poll(); err != nil || len(evs) != 0 {
		t.Fatalf("a quiet poll gave %v %v", evs, err)
	}
	if _, err := a.fs.RemoveWatcher(ctx, authed(connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: id}))); err != nil {
		t.Fatal(err)
	}
	_, err = poll()
	wantCode(t, err, connect.CodeNotFound, "ended")
	for _, bad := range []struct {
		id   string
		code connect.Code
	}{{"x", connect.CodeInvalidArgument}, {"999999", connect.CodeNotFound}} {
		_, err := a.fs.GetWatcherEvents(ctx, authed(connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: bad.id})))
		wantCode(t, err, bad.code, bad.id)
		_, err = a.fs.RemoveWatcher(ctx, authed(connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: bad.id})))
		wantCode(t, err, bad.code, bad.id)
	}
	_, err = a.fs.CreateWatcher(ctx, authed(connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "/no/such/dir"})))
	wantCode(t, err, connect.CodeNotFound, "/no/such/dir")
}
