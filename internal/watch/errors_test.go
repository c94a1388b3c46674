package watch

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

func TestBadPaths(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	touch(t, file)
	must(t, os.Symlink(file, filepath.Join(dir, "to-file")))
	must(t, os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "dangling")))

	tests := []struct {
		name, path string
		code       wire.Code
		message    string
	}{
		{"empty", "", wire.CodeBadRequest, "path is required"},
		{"relative", "some/dir", wire.CodeBadRequest, "not absolute"},
		{"NUL byte", dir + "/a\x00b", wire.CodeBadRequest, "NUL byte"},
		{"missing", filepath.Join(dir, "missing"), wire.CodeNotFound, "no such directory"},
		{"file", file, wire.CodeBadRequest, "not a directory"},
		{"below a file", file + "/x", wire.CodeBadRequest, "not a directory"},
		{"symlink to a file", filepath.Join(dir, "to-file"), wire.CodeBadRequest, "not a directory"},
		{"dangling symlink", filepath.Join(dir, "dangling"), wire.CodeNotFound, "no such directory"},
	}
	for _, tt := range tests {
		for _, recursive := range []bool{false, true} {
			s, err := m.Watch(tt.path, recursive)
			if s != nil || wireCode(err) != tt.code || !strings.Contains(err.Error(), tt.message) {
				t.Errorf("%s (recursive %v): Watch(%q) = %v, %v; want %s containing %q",
					tt.name, recursive, tt.path, s, err, tt.code, tt.message)
			}
		}
	}
	if n := m.InotifyWatches(); n != 0 {
		t.Errorf("failed watches left %d inotify watches", n)
	}
}

// TestPermissionDenied watches as a user who may not read the directory.
// As root, the test drops to another filesystem uid on one locked thread.
func TestPermissionDenied(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	dir := t.TempDir()
	must(t, os.Chmod(filepath.Dir(dir), 0o755))
	must(t, os.Chmod(dir, 0o755))
	open, secret := filepath.Join(dir, "open"), filepath.Join(dir, "secret")
	must(t, os.Mkdir(open, 0o755))
	must(t, os.Mkdir(secret, 0o700))
	must(t, os.Mkdir(filepath.Join(open, "secret"), 0o700))
	if os.Geteuid() != 0 {
		must(t, os.Chmod(secret, 0))
		must(t, os.Chmod(filepath.Join(open, "secret"), 0))
	}

	type result struct {
		s   *stream.Stream
		err error
	}
	watchAsNobody := func(path string, recursive bool) result {
		done := make(chan result)
		go func() {
			// Never unlocked: the thread with the changed fsuid dies with
			// the goroutine.
			runtime.LockOSThread()
			if os.Geteuid() == 0 {
				if err := unix.Setfsgid(65534); err != nil {
					done <- result{err: err}
					return
				}
				if err := unix.Setfsuid(65534); err != nil {
					done <- result{err: err}
					return
				}
			}
			s, err := m.Watch(path, recursive)
			done <- result{s, err}
		}()
		return <-done
	}

	if r := watchAsNobody(open, false); r.err != nil {
		t.Fatalf("a readable directory: %v", r.err)
	}
	for _, tc := range []struct {
		path      string
		recursive bool
		named     string
	}{
		{secret, false, secret},
		{secret, true, secret},
		{open, true, filepath.Join(open, "secret")},
	} {
		r := watchAsNobody(tc.path, tc.recursive)
		if wireCode(r.err) != wire.CodeBadRequest || !strings.Contains(r.err.Error(), tc.named+": permission denied") {
			t.Errorf("Watch(%s, recursive %v) = %v; want bad_request naming %s: permission denied",
				tc.path, tc.recursive, r.err, tc.named)
		}
	}
	if n := m.InotifyWatches(); n != 1 {
		t.Errorf("%d inotify watches, want 1 (the readable directory)", n)
	}
}

func TestUnwatch(t *testing.T) {
	t.Parallel()
	m, reg := newManager(t)
	root := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "a", "b"), 0o755))

	if err := m.Unwatch(1 << 40); wireCode(err) != wire.CodeNotFound {
		t.Errorf("unknown stream: %v, want not_found", err)
	}
	other := reg.Create(stream.Config{Kind: stream.KindProcess,
		Channels: []stream.ChannelSpec{{Name: "stdout"}}})
	if err := m.Unwatch(other.ID); wireCode(err) != wire.CodeBadRequest {
		t.Errorf("a process stream: %v, want bad_request", err)
	}

	s := mustWatch(t, m, root, true)
	if info, ok := s.Control.(*Info); !ok || info.Path != root || !info.Recursive {
		t.Errorf("Control = %#v", s.Control)
	}
	c := attach(t, s, 0)
	if n := m.InotifyWatches(); n != 3 {
		t.Fatalf("%d inotify watches for 3 directories", n)
	}
	must(t, m.Unwatch(s.ID))
	if _, ok := c.next(); ok || c.end.End.Reason != stream.ReasonClosed {
		t.Fatalf("after unwatch: end %+v", c.end)
	}
	if n := m.InotifyWatches(); n != 0 {
		t.Errorf("%d inotify watches left after unwatch", n)
	}
	if err := m.Unwatch(s.ID); err != nil {
		t.Errorf("second unwatch: %v", err)
	}
}

func TestWatchAfterClose(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	root := t.TempDir()
	s := mustWatch(t, m, root, false)
	must(t, m.Close())
	if e := s.Ended(); e == nil || e.Reason != stream.ReasonClosed {
		t.Errorf("stream after Close: end %+v", e)
	}
	if _, err := m.Watch(root, false); wireCode(err) != wire.CodeUnavailable {
		t.Errorf("Watch after Close: %v, want unavailable", err)
	}
}
