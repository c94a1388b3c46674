package files

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoMagicLinksAsAnotherUser: as nobody, the agent's own open files
// are out of reach through /proc's magic links (a 0644 file in a
// root-only directory, which root's download holds open), by any of their
// names, through a symlink to one, and through a directory the agent
// holds open; the agent itself still reads what it may.
func TestNoMagicLinksAsAnotherUser(t *testing.T) {
	needRoot(t)
	m, _ := newManager(t)
	private := t.TempDir() // 0700, root's
	secret := filepath.Join(private, "secret")
	writeFile(t, secret, "root's")
	held, err := m.Open("", "", secret) // root's download, in progress
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	dir, err := os.Open(private)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	fd, dfd := strconv.Itoa(int(held.Fd())), strconv.Itoa(int(dir.Fd()))
	public, err := os.MkdirTemp("", "rayito-magic-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(public)
	os.Chmod(public, 0o755)
	link := filepath.Join(public, "innocent")
	if err := os.Symlink("/proc/self/fd/"+fd, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		"/proc/self/fd/" + fd,
		"/proc/" + strconv.Itoa(os.Getpid()) + "/fd/" + fd,
		"/proc/thread-self/fd/" + fd,
		"/proc/self/fd/" + dfd + "/secret",
		link,
	} {
		f, err := m.Open("", "nobody", p)
		if err == nil {
			b, _ := io.ReadAll(f)
			f.Close()
			t.Fatalf("nobody read %s through %s", b, p)
		}
		if !errors.Is(err, ErrPermission) || !strings.Contains(err.Error(), "magic link") {
			t.Errorf("open %s as nobody: %v, want permission denied naming the magic link", p, err)
		}
		if _, err := m.Stat("nobody", p); !errors.Is(err, ErrPermission) {
			t.Errorf("stat %s as nobody: %v", p, err)
		}
	}
	if _, err := m.List("nobody", "/proc/self/fd/"+dfd, 1); !errors.Is(err, ErrPermission) {
		t.Errorf("list through the held directory as nobody: %v", err)
	}
	if err := m.MakeDir("nobody", "/proc/self/fd/"+dfd+"/new/deeper", true); !errors.Is(err, ErrPermission) || !strings.Contains(err.Error(), "magic link") {
		t.Errorf("mkdir through the held directory as nobody: %v", err)
	}
	// The agent itself reads what it holds, and nobody what nobody may.
	f, err := m.Open("", "", "/proc/self/fd/"+fd)
	if err != nil {
		t.Fatalf("the agent's own read through its fd: %v", err)
	}
	f.Close()
	if _, err := m.Stat("nobody", "/proc/1/status"); err != nil {
		t.Fatalf("nobody's stat of /proc/1/status: %v", err)
	}
	// For nobody, /proc/self is the agent: its entries (the files it
	// holds open for others, its environment) are not nobody's to see.
	for _, p := range []string{"/proc/self/fd", "/proc/self/environ", "/proc/thread-self/status", "/proc/" + strconv.Itoa(os.Getpid()) + "/fd"} {
		if _, err := m.List("nobody", p, 1); !errors.Is(err, ErrPermission) {
			t.Errorf("list %s as nobody: %v", p, err)
		}
		if _, err := m.Stat("nobody", p); !errors.Is(err, ErrPermission) {
			t.Errorf("stat %s as nobody: %v", p, err)
		}
	}
	if _, err := m.List("", "/proc/self/fd", 1); err != nil {
		t.Errorf("the agent's own listing of /proc/self/fd: %v", err)
	}
}

// TestMagicNames: where openat2 is missing, the /proc names that lead to
// magic links are refused by name.
func TestMagicNames(t *testing.T) {
	for p, want := range map[string]bool{
		"/proc/self/fd/3":              true,
		"/proc/self/fd":                true,
		"/proc/thread-self/cwd/x":      true,
		"/proc/123/root/etc/shadow":    true,
		"/proc/123/task/124/exe":       true,
		"/proc/self/map_files/1-2":     true,
		"/proc/self/status":            false,
		"/proc/cpuinfo":                false,
		"/proc/self/task/1/status":     false,
		"/srv/proc/self/fd/3":          false,
		"/proc/sys/kernel/random/uuid": false,
	} {
		if got := magicName(p); got != want {
			t.Errorf("magicName(%q) = %v, want %v", p, got, want)
		}
	}
}
