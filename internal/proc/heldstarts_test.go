package proc

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestStartsWaitForTheThaw: while a pause holds user work frozen, a
// command's start waits for the thaw rather than fork a child into the
// frozen cgroup (where it would stop, holding the start and the reaper's
// lock, so that a kill sent during the pause would hang until the
// resume). Without cgroup v2 here, the user cgroup is a directory that
// says it is frozen, and a start that does not wait reaches the fork at
// once (and fails there: the directory is no cgroup).
func TestStartsWaitForTheThaw(t *testing.T) {
	r := testReaper(t)
	base := t.TempDir()
	c := &Cgroups{user: filepath.Join(base, "user"), hooks: filepath.Join(base, "hooks"), workFD: -1, spareFD: -1, hooksFD: -1}
	for _, d := range []string{c.user, c.hooks, filepath.Join(c.user, "work")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{c.user, c.hooks} {
		if err := os.WriteFile(filepath.Join(d, "cgroup.events"), []byte("populated 1\nfrozen 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := syscall.Open(filepath.Join(c.user, "work"), syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	c.workFD = fd
	r.Isolate(c, nil)
	t.Cleanup(func() { r.Isolate(nil, nil) })

	u := NewUserWork(c, r)
	if _, err := u.Freeze(context.Background()); err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() {
		_, _, err := r.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{})
		started <- err
	}()
	select {
	case err := <-started:
		u.Thaw()
		t.Fatalf("a start during the freeze was not held: it reached the fork (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	// As the kernel would once the thaw is written: Thaw waits for it.
	for _, d := range []string{c.user, c.hooks} {
		os.WriteFile(filepath.Join(d, "cgroup.events"), []byte("populated 1\nfrozen 0\n"), 0o644)
	}
	if err := u.Thaw(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started: // the fork, into a directory that is no cgroup, fails
	case <-time.After(30 * time.Second):
		t.Fatal("a start held by the freeze did not go on after the thaw")
	}
	if b, _ := os.ReadFile(filepath.Join(c.user, "cgroup.freeze")); string(b) != "0" {
		t.Fatalf("the thaw wrote %q to cgroup.freeze", b)
	}
}
