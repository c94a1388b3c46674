package files

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
)

// flipper swaps the symlink link between targets as fast as it can (each
// swap a rename over the link, as a hostile program of the sandbox would)
// until stopped.
func flipper(t *testing.T, link string, targets ...string) (stop func()) {
	t.Helper()
	if err := os.Symlink(targets[0], link); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tmp := link + ".new"
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			os.Remove(tmp)
			if err := os.Symlink(targets[i%len(targets)], tmp); err != nil {
				t.Error(err)
				return
			}
			if err := os.Rename(tmp, link); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

func ownerOf(t *testing.T, path string) uint32 {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Uid
}

// A directory of the path swapped for a symlink to root's directory while
// the agent creates directories and files for nobody: with the agent's
// rights on nobody's behalf (the envd surface for a privileged user), no
// directory that existed is ever given to nobody, only the ones the
// operation made; as nobody (everyone else), nothing is made in root's
// directory at all.
func TestSwappedSymlinksGiveNothingAway(t *testing.T) {
	needRoot(t)
	m, _ := newManager(t)
	nobody, err := m.User("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	base := t.TempDir()
	openToAll(t, base)
	rootDir := filepath.Join(base, "root")
	scratch := filepath.Join(base, "scratch")
	for _, d := range []string{filepath.Join(rootDir, "target"), scratch} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(scratch, 0o777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "x")
	stop := flipper(t, link, scratch, rootDir)
	const rounds = 300
	for i := range rounds {
		n := strconv.Itoa(i)
		m.MakeDirFor(m.Agent(), filepath.Join(link, "target", "a"+n, "deeper"), true, &nobody)
		m.MakeDir("nobody", filepath.Join(link, "target", "b"+n), true)
		if w, err := m.Create(m.Agent(), filepath.Join(link, "target", "c"+n), WriteOptions{Parents: true, Owner: &nobody}); err == nil {
			w.Abort()
		}
		if w, err := m.Create("nobody", filepath.Join(link, "target", "d"+n), WriteOptions{Parents: true}); err == nil {
			w.Commit()
		}
	}
	stop()
	for _, p := range []string{rootDir, filepath.Join(rootDir, "target")} {
		if uid := ownerOf(t, p); uid != 0 {
			t.Errorf("%s, root's, was given to uid %d", p, uid)
		}
	}
	if entries, _ := os.ReadDir(rootDir); len(entries) != 1 {
		t.Errorf("root's directory has %d entries, want its target alone", len(entries))
	}
	entries, _ := os.ReadDir(filepath.Join(rootDir, "target"))
	for _, e := range entries {
		p := filepath.Join(rootDir, "target", e.Name())
		switch e.Name()[0] {
		case 'a': // made with the agent's rights, for nobody: nobody's
			if uid := ownerOf(t, p); uid != nobody.UID {
				t.Errorf("%s made for nobody is uid %d's", p, uid)
			}
		default:
			t.Errorf("%s was made in root's directory, as nobody or left behind", p)
		}
	}
}

// A symlink swapped between a scratch directory and a /proc magic link
// (the agent's descriptor of a directory nobody cannot reach) while
// nobody writes, makes and moves files through it: nothing lands in that
// directory, not even a temporary file.
func TestSwappedMagicLinkLandsNothing(t *testing.T) {
	needRoot(t)
	m, _ := newManager(t)
	base := t.TempDir()
	openToAll(t, base)
	private := filepath.Join(base, "private")
	hidden := filepath.Join(private, "open")
	if err := os.MkdirAll(hidden, 0o700); err != nil {
		t.Fatal(err)
	}
	// World-writable, but behind a directory only root may enter.
	if err := os.Chmod(hidden, 0o777); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(hidden)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	magic := fmt.Sprintf("/proc/self/fd/%d", held.Fd())
	scratch := filepath.Join(base, "scratch")
	if err := os.Mkdir(scratch, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(scratch, 0o777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "x")
	stop := flipper(t, link, scratch, magic)
	for i := range 300 {
		n := strconv.Itoa(i)
		if w, err := m.Create("nobody", filepath.Join(link, "f"+n), WriteOptions{}); err == nil {
			w.Write([]byte("x"))
			w.Commit()
		}
		m.MakeDir("nobody", filepath.Join(link, "d"+n), false)
		writeFile(t, filepath.Join(scratch, "m"+n), "x")
		os.Chmod(filepath.Join(scratch, "m"+n), 0o666)
		m.Move("nobody", filepath.Join(scratch, "m"+n), filepath.Join(link, "moved"+n))
	}
	stop()
	if entries, _ := os.ReadDir(hidden); len(entries) > 0 {
		names := []string{}
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("nobody put %d entries where only a magic link leads: %v", len(entries), names)
	}
}
