package files

import (
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"

	"github.com/rayito/rayito-agent/internal/proc"
)

// TestNobody: operations as nobody are checked as nobody, and what nobody
// creates belongs to nobody, with the umask's mode.
func TestNobody(t *testing.T) {
	t.Parallel()
	needRoot(t)
	m, _ := newManager(t)
	for name, root := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			openDir(t, root)
			private := filepath.Join(root, "private")
			os.Mkdir(private, 0o700)
			writeFile(t, filepath.Join(private, "secret"), "s")

			_, err := m.List("nobody", "/root", 1)
			wantKind(t, err, ErrPermission)
			_, err = m.Open("nobody", filepath.Join(private, "secret"))
			wantKind(t, err, ErrPermission)
			_, err = m.Stat("nobody", filepath.Join(private, "secret"))
			wantKind(t, err, ErrPermission)
			_, err = m.Create("nobody", filepath.Join(private, "new"), WriteOptions{})
			wantKind(t, err, ErrPermission)
			wantKind(t, m.Remove("nobody", filepath.Join(private, "secret"), false), ErrPermission)
			wantKind(t, m.MakeDir("nobody", filepath.Join(private, "d"), true), ErrPermission)
			wantKind(t, m.Move("nobody", filepath.Join(private, "secret"), filepath.Join(root, "stolen")), ErrPermission)

			w, err := m.Create("nobody", filepath.Join(root, "mine/sub/f"), WriteOptions{Parents: true})
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(w, "by nobody")
			if _, err := w.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := m.MakeDir("nobody", filepath.Join(root, "mine/dir"), true); err != nil {
				t.Fatal(err)
			}
			nobody, _ := m.User("nobody")
			for p, mode := range map[string]os.FileMode{"mine": 0o755, "mine/sub": 0o755, "mine/sub/f": 0o644, "mine/dir": 0o755} {
				st, err := os.Stat(filepath.Join(root, p))
				if err != nil {
					t.Fatal(err)
				}
				sys := st.Sys().(*syscall.Stat_t)
				if sys.Uid != nobody.UID || sys.Gid != nobody.GID || st.Mode().Perm() != mode {
					t.Fatalf("%s: owner %d:%d mode %v, want %d:%d %v", p, sys.Uid, sys.Gid, st.Mode().Perm(), nobody.UID, nobody.GID, mode)
				}
			}
			info, err := m.Stat("nobody", filepath.Join(root, "mine/sub/f"))
			if err != nil || info.Owner != "nobody" || info.Group != "nogroup" {
				t.Fatalf("stat as nobody: %+v, %v", info, err)
			}
		})
	}
}

// TestDefaultUser: an operation that names no user runs as the default
// user of proc.Defaults, as commands do.
func TestDefaultUser(t *testing.T) {
	t.Parallel()
	needRoot(t)
	defaults := &proc.Defaults{}
	defaults.Set("nobody", "", nil)
	m, err := New(Options{Defaults: defaults})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	_, err = m.List("", dir, 1)
	wantKind(t, err, ErrPermission)
	if _, err := m.List("root", dir, 1); err != nil {
		t.Fatalf("as root by name: %v", err)
	}
}

// TestIdentityStaysOnItsThread: while operations run as nobody on
// borrowed threads, everything else in the process keeps the agent's
// identity, and so do the threads once given back.
func TestIdentityStaysOnItsThread(t *testing.T) {
	needRoot(t)
	m, _ := newManager(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	f := filepath.Join(dir, "f")
	writeFile(t, f, "x")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := m.Stat("nobody", f); err == nil {
					t.Error("nobody could stat a file in a 0700 directory of root")
					return
				}
				runtime.Gosched()
			}
		}()
	}
	for range 2000 {
		if _, err := os.ReadFile(f); err != nil {
			t.Fatalf("the agent lost its identity: %v", err)
		}
		if _, err := m.Stat("", f); err != nil {
			t.Fatalf("the agent lost its identity: %v", err)
		}
	}
	close(stop)
	wg.Wait()
}
