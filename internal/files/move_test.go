package files

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestMove(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "a"), "A")
	writeFile(t, filepath.Join(root, "b"), "B")
	if err := m.Move("", filepath.Join(root, "a"), filepath.Join(root, "c")); err != nil {
		t.Fatal(err)
	}
	if readFile(t, filepath.Join(root, "c")) != "A" {
		t.Fatal("content not moved")
	}
	// An existing file is replaced, as by rename(2).
	if err := m.Move("", filepath.Join(root, "c"), filepath.Join(root, "b")); err != nil {
		t.Fatal(err)
	}
	if readFile(t, filepath.Join(root, "b")) != "A" {
		t.Fatal("target not replaced")
	}
	wantKind(t, m.Move("", filepath.Join(root, "nope"), filepath.Join(root, "x")), ErrNotFound)
	os.MkdirAll(filepath.Join(root, "full/x"), 0o755)
	os.Mkdir(filepath.Join(root, "d"), 0o755)
	wantKind(t, m.Move("", filepath.Join(root, "d"), filepath.Join(root, "full")), ErrNotEmpty)
	wantKind(t, m.Move("", filepath.Join(root, "b"), filepath.Join(root, "missing/b")), ErrNotFound)
	wantKind(t, m.Move("", filepath.Join(root, "d"), filepath.Join(root, "d/inside")), ErrInvalid)
}

// TestMoveAcrossFilesystems moves a tree from the disk to a tmpfs: it is
// copied with its modes, times and symlinks, then the source goes.
func TestMoveAcrossFilesystems(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	fss := filesystems(t)
	src := filepath.Join(fss["disk"], "tree")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	writeFile(t, filepath.Join(src, "sub/data"), "payload")
	os.Chmod(filepath.Join(src, "sub/data"), 0o600)
	os.Symlink("sub/data", filepath.Join(src, "link"))
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	os.Chtimes(filepath.Join(src, "sub/data"), old, old)
	// A read-only directory must still receive its entries.
	os.Chmod(filepath.Join(src, "sub"), 0o555)
	dst := filepath.Join(fss["tmpfs"], "moved")
	if err := m.Move("", src, dst); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(src); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("source still there: %v", err)
	}
	st, err := os.Stat(filepath.Join(dst, "sub/data"))
	if err != nil || st.Mode().Perm() != 0o600 || !st.ModTime().Equal(old) {
		t.Fatalf("copied file: %v, %v", st, err)
	}
	if readFile(t, filepath.Join(dst, "link")) != "payload" {
		t.Fatal("symlink not copied")
	}
	if target, _ := os.Readlink(filepath.Join(dst, "link")); target != "sub/data" {
		t.Fatalf("symlink target %q", target)
	}
	if st, _ := os.Stat(filepath.Join(dst, "sub")); st.Mode().Perm() != 0o555 {
		t.Fatalf("directory mode %v", st.Mode())
	}
	if left := temps(t, fss["tmpfs"]); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	os.Chmod(filepath.Join(dst, "sub"), 0o755)
}

// TestMoveAcrossFailsCleanly: a tree that cannot be copied (it holds a
// FIFO) stays where it was and leaves nothing at the target.
func TestMoveAcrossFailsCleanly(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	fss := filesystems(t)
	src := filepath.Join(fss["disk"], "tree")
	os.MkdirAll(src, 0o755)
	writeFile(t, filepath.Join(src, "a"), "a")
	if err := mkfifo(filepath.Join(src, "pipe")); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(fss["tmpfs"], "moved")
	wantKind(t, m.Move("", src, dst), ErrUnsupported)
	if readFile(t, filepath.Join(src, "a")) != "a" {
		t.Fatal("source damaged")
	}
	if _, err := os.Lstat(dst); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("target exists: %v", err)
	}
	if left := temps(t, fss["tmpfs"]); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// TestMoveParents: with Parents the target's missing directories are
// made, owned by the user; a missing source makes none.
func TestMoveParents(t *testing.T) {
	t.Parallel()
	needRoot(t)
	m, _ := newManager(t)
	root := t.TempDir()
	openToAll(t, root)
	writeFile(t, filepath.Join(root, "a"), "A")
	os.Chown(filepath.Join(root, "a"), 65534, 65534)
	to := filepath.Join(root, "new/deeper/a")
	if err := m.MoveWith("nobody", filepath.Join(root, "a"), to, MoveOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	if readFile(t, to) != "A" {
		t.Fatal("content not moved")
	}
	st, err := os.Stat(filepath.Join(root, "new/deeper"))
	if err != nil || statT(st).Uid != 65534 {
		t.Fatalf("parent made: %v, %v", st, err)
	}
	wantKind(t, m.MoveWith("nobody", filepath.Join(root, "gone"), filepath.Join(root, "other/x"), MoveOptions{Parents: true}), ErrNotFound)
	if _, err := os.Lstat(filepath.Join(root, "other")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing source made the target's parent: %v", err)
	}
	writeFile(t, filepath.Join(root, "file"), "")
	wantKind(t, m.MoveWith("", to, filepath.Join(root, "file/x/a"), MoveOptions{Parents: true}), ErrNotDir)
	if readFile(t, to) != "A" {
		t.Fatal("a failed move changed the source")
	}
}
