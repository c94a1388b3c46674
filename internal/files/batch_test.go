package files

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stage starts a write of "new NAME" to each name in dir, in a batch.
func stage(t *testing.T, m *Manager, dir string, o WriteOptions, names ...string) *Batch {
	t.Helper()
	b := &Batch{}
	for _, name := range names {
		w, err := m.Create("", filepath.Join(dir, name), o)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, "new "+name)
		if err := b.Add(w); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// wantDir fails unless dir holds exactly the files of want, with their
// contents.
func wantDir(t *testing.T, dir string, want map[string]string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(want) {
		t.Fatalf("%s holds %v, want %v", dir, entries, want)
	}
	for name, content := range want {
		if got := readFile(t, filepath.Join(dir, name)); got != content {
			t.Fatalf("%s holds %q, want %q", name, got, content)
		}
	}
}

func TestBatchCommitsAll(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	dir := t.TempDir()
	b := stage(t, m, dir, WriteOptions{}, "a", "b")
	out, err := b.Commit()
	if err != nil || len(out) != 2 || out[0].Path != filepath.Join(dir, "a") || !out[1].Created {
		t.Fatalf("commit: %+v, %v", out, err)
	}
	wantDir(t, dir, map[string]string{"a": "new a", "b": "new b"})
	if len(b.writers) != 0 {
		t.Fatal("a committed batch still holds writers")
	}
}

func TestBatchRefusesTwoFilesForOnePath(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	dir := t.TempDir()
	b := stage(t, m, dir, WriteOptions{}, "a")
	w, _ := m.Create("", filepath.Join(dir, "a"), WriteOptions{})
	if err := b.Add(w); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "two files") {
		t.Fatalf("a second file for a path: %v", err)
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Fatal("the refused writer was not aborted")
	}
	b.Abort()
	wantDir(t, dir, nil)
}

// A target that no longer suits its file when the batch commits (another
// process changed it meanwhile) is found before any rename: nothing is
// committed.
func TestBatchChecksEveryTargetFirst(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	for _, c := range []struct {
		name  string
		o     WriteOptions
		inWay func(path string)
		kind  error
	}{
		{"exclusive", WriteOptions{Exclusive: true}, func(p string) { writeFile(t, p, "theirs") }, ErrExists},
		{"a directory", WriteOptions{}, func(p string) { os.Mkdir(p, 0o755) }, ErrIsDir},
		{"no directory", WriteOptions{}, func(p string) { os.RemoveAll(filepath.Dir(p)) }, ErrNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if !c.o.Exclusive {
				writeFile(t, filepath.Join(dir, "a"), "old a")
			}
			os.Mkdir(filepath.Join(dir, "sub"), 0o755)
			b := stage(t, m, dir, c.o, "a", "sub/b", "c")
			c.inWay(filepath.Join(dir, "sub/b"))
			if _, err := b.Commit(); !errors.Is(err, c.kind) || strings.Contains(err.Error(), "committed") {
				t.Fatalf("commit: %v, want %v", err, c.kind)
			}
			a, _ := os.ReadFile(filepath.Join(dir, "a"))
			if _, err := os.Stat(filepath.Join(dir, "c")); string(a) == "new a" || !os.IsNotExist(err) {
				t.Fatalf("committed by a failed batch: a holds %q; c: %v", a, err)
			}
			if left := temps(t, dir); len(left) != 0 {
				t.Fatalf("temporary files left: %v", left)
			}
		})
	}
}

// A rename that fails after every check passed (a file made between the
// check and the rename) leaves the files before it committed, the others
// not, and the error says so.
func TestBatchRenameFailsMidway(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	dir := t.TempDir()
	b := stage(t, m, dir, WriteOptions{Exclusive: true}, "a", "b", "c")
	b.beforeRenames = func() { writeFile(t, filepath.Join(dir, "b"), "theirs") }
	out, err := b.Commit()
	if !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "committed before it: 1 of the 3 files") {
		t.Fatalf("commit: %v", err)
	}
	if len(out) != 1 || out[0].Path != filepath.Join(dir, "a") {
		t.Fatalf("committed %+v", out)
	}
	wantDir(t, dir, map[string]string{"a": "new a", "b": "theirs"})
}
