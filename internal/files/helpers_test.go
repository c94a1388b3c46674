package files

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/stream"
)

// newManager returns a manager with a registry and a journal of its own.
func newManager(t testing.TB) (*Manager, *stream.Registry) {
	t.Helper()
	reg := stream.NewRegistry(0)
	m, err := New(Options{Registry: reg, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		reg.Close()
	})
	return m, reg
}

// filesystems are the roots tests run on: the disk (ext4 on the project's
// machines) and a tmpfs.
func filesystems(t testing.TB) map[string]string {
	t.Helper()
	shm, err := os.MkdirTemp("/dev/shm", "files-test-")
	if err != nil {
		t.Fatalf("a tmpfs is needed at /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	if typ := fsType(t, shm); typ != unix.TMPFS_MAGIC {
		t.Fatalf("/dev/shm is not a tmpfs (0x%x)", typ)
	}
	return map[string]string{"disk": t.TempDir(), "tmpfs": shm}
}

func fsType(t testing.TB, path string) int64 {
	var sfs unix.Statfs_t
	if err := unix.Statfs(path, &sfs); err != nil {
		t.Fatal(err)
	}
	return sfs.Type
}

// openToAll makes dir and its parents up to /tmp searchable and writable by
// anyone, for tests that act as another user.
func openToAll(t testing.TB, dir string) {
	t.Helper()
	for d := dir; d != "/" && d != os.TempDir() && d != "/dev/shm"; d = filepath.Dir(d) {
		mode := os.FileMode(0o755)
		if d == dir {
			mode = 0o777
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
}

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: acts as other users")
	}
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// temps lists the temporary files left in dir.
func temps(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if isTempName(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

func wantKind(t testing.TB, err, kind error) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("got %v, want %v", err, kind)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%v is not a *files.Error", err)
	}
}

// mountTmpfs mounts a tmpfs of size bytes at a new directory, unmounted
// at cleanup.
func mountTmpfs(t testing.TB, size string) string {
	t.Helper()
	needRoot(t)
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, strings.TrimSpace(string(out)))
		}
	})
	return dir
}

// mountExt4 makes an ext4 filesystem of size bytes in a file, with
// reservedPct percent of its blocks reserved for root, mounts it (through
// a loop device) at a new directory anyone may write in (openDir), and unmounts it
// at cleanup.
func mountExt4(t testing.TB, size int64, reservedPct int) string {
	t.Helper()
	needRoot(t)
	img := filepath.Join(t.TempDir(), "ext4.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", strconv.Itoa(reservedPct), img).CombinedOutput(); err != nil {
		t.Skipf("cannot make an ext4 filesystem: %v: %s", err, bytes.TrimSpace(out))
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount an ext4 image: %v: %s", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, strings.TrimSpace(string(out)))
		}
	})
	openToAll(t, dir)
	return dir
}

func mkfifo(path string) error { return unix.Mkfifo(path, 0o600) }
