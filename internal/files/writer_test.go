package files

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestWriterIsAtomic(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	for name, root := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(root, "f")
			writeFile(t, p, "old")
			os.Chmod(p, 0o640)
			w, err := m.Create("", p, WriteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(w, "new content")
			if got := readFile(t, p); got != "old" {
				t.Fatalf("a reader saw %q before the commit", got)
			}
			if len(temps(t, root)) != 1 {
				t.Fatalf("no temporary file next to the target: %v", temps(t, root))
			}
			if tmp := filepath.Join(root, temps(t, root)[0]); !IsTemp(tmp) || IsTemp(p) || IsTemp(root+"/.f.tmp") {
				t.Fatalf("IsTemp: wrong about %s or %s", tmp, p)
			}
			c, err := w.Commit()
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256([]byte("new content"))
			if c.Size != 11 || c.SHA256 != hex.EncodeToString(sum[:]) || c.Created || c.Path != p {
				t.Fatalf("committed %+v", c)
			}
			if got := readFile(t, p); got != "new content" {
				t.Fatalf("after commit: %q", got)
			}
			if st, _ := os.Stat(p); st.Mode().Perm() != 0o640 {
				t.Fatalf("a replaced file lost its mode: %v", st.Mode())
			}
			if left := temps(t, root); len(left) != 0 {
				t.Fatalf("temporary files left: %v", left)
			}
			if _, err := w.Write([]byte("more")); err == nil {
				t.Fatal("write after commit accepted")
			}

			w, _ = m.Create("", p, WriteOptions{})
			io.WriteString(w, "never")
			w.Abort()
			w.Abort()
			if got := readFile(t, p); got != "new content" {
				t.Fatalf("after abort: %q", got)
			}
			if left := temps(t, root); len(left) != 0 {
				t.Fatalf("temporary files left after abort: %v", left)
			}
			if _, err := w.Commit(); err == nil {
				t.Fatal("commit after abort succeeded")
			}
		})
	}
}

func TestWriterOptions(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	root := t.TempDir()
	write := func(path, content string, o WriteOptions) (Committed, error) {
		w, err := m.Create("", path, o)
		if err != nil {
			return Committed{}, err
		}
		io.WriteString(w, content)
		return w.Commit()
	}
	p := filepath.Join(root, "f")
	c, err := write(p, "one", WriteOptions{Mode: 0o600})
	if err != nil || !c.Created {
		t.Fatal(c, err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode())
	}
	c, err = write(p, "+two", WriteOptions{Append: true})
	sum := sha256.Sum256([]byte("one+two"))
	if err != nil || readFile(t, p) != "one+two" || c.Size != 7 || c.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("append: %q %+v %v", readFile(t, p), c, err)
	}
	// NoHash: the same content, appended and all, with no checksum.
	c, err = write(p, "+three", WriteOptions{Append: true, NoHash: true})
	if err != nil || readFile(t, p) != "one+two+three" || c.Size != 13 || c.SHA256 != "" {
		t.Fatalf("append without a hash: %q %+v %v", readFile(t, p), c, err)
	}
	_, err = write(p, "x", WriteOptions{Exclusive: true})
	wantKind(t, err, ErrExists)
	if _, err := write(filepath.Join(root, "new"), "x", WriteOptions{Exclusive: true, Mode: 0o4755}); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(filepath.Join(root, "new")); st.Mode()&os.ModeSetuid == 0 || st.Mode().Perm() != 0o755 {
		t.Fatalf("an explicit mode is applied exactly: %v", st.Mode())
	}
	// Exclusive also holds when the path appears between Create and Commit.
	w, err := m.Create("", filepath.Join(root, "race"), WriteOptions{Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "race"), "first")
	if _, err := w.Commit(); err == nil || readFile(t, filepath.Join(root, "race")) != "first" {
		t.Fatalf("exclusive commit over a new file: %v", err)
	}
	_, err = write(filepath.Join(root, "a/b/c"), "x", WriteOptions{})
	wantKind(t, err, ErrNotFound)
	if _, err := write(filepath.Join(root, "a/b/c"), "x", WriteOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	_, err = write(filepath.Join(root, "a/b/c/d"), "x", WriteOptions{Parents: true})
	wantKind(t, err, ErrNotDir)
	_, err = write(filepath.Join(root, "a"), "x", WriteOptions{})
	wantKind(t, err, ErrIsDir)
	_, err = m.Create("", p, WriteOptions{Mode: 0o10000})
	wantKind(t, err, ErrInvalid)
	mkfifo(filepath.Join(root, "pipe"))
	_, err = write(filepath.Join(root, "pipe"), "x", WriteOptions{})
	wantKind(t, err, ErrNotRegular)

	// A symlink is written through; a dangling one is replaced.
	os.Symlink("f", filepath.Join(root, "link"))
	if _, err := write(filepath.Join(root, "link"), "via link", WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if readFile(t, p) != "via link" {
		t.Fatal("symlink not followed")
	}
	if st, _ := os.Lstat(filepath.Join(root, "link")); st.Mode()&os.ModeSymlink == 0 {
		t.Fatal("symlink replaced")
	}
	os.Symlink("nowhere", filepath.Join(root, "dangling"))
	if _, err := write(filepath.Join(root, "dangling"), "now a file", WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Lstat(filepath.Join(root, "dangling")); !st.Mode().IsRegular() {
		t.Fatal("dangling symlink not replaced by the file")
	}
	if left := temps(t, root); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// TestWriterVirtualFilesystems: /proc and /sys get a clear refusal, not
// a half-done write.
func TestWriterVirtualFilesystems(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	for _, p := range []string{"/proc/sys/kernel/hostname", "/proc/rayito-test", "/sys/kernel/rayito-test"} {
		_, err := m.Create("", p, WriteOptions{})
		wantKind(t, err, ErrUnsupported)
		if !strings.Contains(err.Error(), "virtual filesystem") {
			t.Fatalf("%s: message %q", p, err)
		}
	}
}

// TestWriterNoSpace fills a small tmpfs: the write reports ErrNoSpace,
// the old file is intact and the temporary file is gone.
func TestWriterNoSpace(t *testing.T) {
	t.Parallel()
	w, untouched := smallDiskWriter(t)
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	var err error
	for i := 0; ; i++ {
		if _, err = w.Write(chunk); err != nil {
			break
		}
		if i > 64 {
			t.Fatal("wrote 4 MiB into a 1 MiB tmpfs")
		}
	}
	wantKind(t, err, ErrNoSpace)
	if _, err := w.Commit(); err == nil {
		t.Fatal("commit after a failed write succeeded")
	}
	untouched()
}

// smallDiskWriter returns a writer over a file of a 1 MiB tmpfs, and a
// check that the old file is intact and no temporary file is left.
func smallDiskWriter(t *testing.T) (*Writer, func()) {
	dir := mountTmpfs(t, "1m")
	m, _ := newManager(t)
	p := filepath.Join(dir, "f")
	writeFile(t, p, "old content")
	w, err := m.Create("", p, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return w, func() {
		t.Helper()
		if got := readFile(t, p); got != "old content" {
			t.Fatalf("old file damaged: %q", got)
		}
		if left := temps(t, dir); len(left) != 0 {
			t.Fatalf("temporary files left: %v", left)
		}
	}
}

// TestConcurrentWriters: two writers of one path never mix; the last
// commit wins.
func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	p := filepath.Join(t.TempDir(), "f")
	contents := []string{strings.Repeat("a", 1<<20), strings.Repeat("b", 1<<20)}
	ws := make([]*Writer, 2)
	for i := range ws {
		var err error
		if ws[i], err = m.Create("", p, WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for off := 0; off < len(contents[i]); off += 4096 {
				w.Write([]byte(contents[i][off : off+4096]))
			}
		}()
	}
	wg.Wait()
	for i, w := range ws {
		if _, err := w.Commit(); err != nil {
			t.Fatal(err)
		}
		if readFile(t, p) != contents[i] {
			t.Fatalf("after commit %d the file is not that writer's content", i)
		}
	}
}

// TestJournalCleansUp: a temporary file left by a crash (a writer never
// committed nor aborted) is removed when the next manager starts.
func TestJournalCleansUp(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	m, err := New(Options{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "f"), "old")
	w, err := m.Create("", filepath.Join(dir, "f"), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, "half")
	if len(temps(t, dir)) != 1 {
		t.Fatal("no temporary file")
	}
	// A bystander that looks like ours but is not journaled stays.
	writeFile(t, filepath.Join(dir, ".other.rayito-00000000.tmp"), "")
	m2, err := New(Options{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if left := temps(t, dir); len(left) != 1 || left[0] != ".other.rayito-00000000.tmp" {
		t.Fatalf("after restart: %v", left)
	}
	if readFile(t, filepath.Join(dir, "f")) != "old" {
		t.Fatal("old content damaged")
	}
	if entries, _ := os.ReadDir(filepath.Join(state, "files-temp")); len(entries) != 0 {
		t.Fatalf("journal not emptied: %v", entries)
	}
}

// dribble yields its data a few bytes a read, then its error.
type dribble struct {
	data []byte
	err  error
}

func (d *dribble) Read(p []byte) (int, error) {
	if len(d.data) == 0 {
		return 0, d.err
	}
	n := copy(p[:min(len(p), 3)], d.data)
	d.data = d.data[n:]
	return n, nil
}

// ReadFrom takes a reader that yields little at a time whole, and tells
// its end from its failure (even one named io.ErrUnexpectedEOF).
func TestWriterReadFrom(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	p := filepath.Join(t.TempDir(), "f")
	content := strings.Repeat("0123456789", 100000)
	w, err := m.Create("", p, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := w.ReadFrom(&dribble{data: []byte(content), err: io.EOF}); err != nil || n != int64(len(content)) {
		t.Fatalf("ReadFrom: %d, %v", n, err)
	}
	if _, err := w.Commit(); err != nil || readFile(t, p) != content {
		t.Fatalf("commit: %v", err)
	}
	w, _ = m.Create("", p, WriteOptions{})
	if _, err := w.ReadFrom(&dribble{data: []byte("abc"), err: io.ErrUnexpectedEOF}); err != io.ErrUnexpectedEOF {
		t.Fatalf("a failing reader: %v", err)
	}
	w.Abort()
}

// endless yields zeros forever and counts what was read of it.
type endless struct{ read int64 }

func (e *endless) Read(p []byte) (int, error) {
	clear(p)
	e.read += int64(len(p))
	return len(p), nil
}

// ReadFrom stops at a full disk even from a reader that never ends: the
// write that fails on its goroutine ends the copy with ErrNoSpace, having
// read at most a buffer past it, and leaves no temporary file behind.
func TestWriterReadFromNoSpace(t *testing.T) {
	t.Parallel()
	w, untouched := smallDiskWriter(t)
	src := &endless{}
	n, err := w.ReadFrom(src)
	wantKind(t, err, ErrNoSpace)
	// At most its two buffers (of 1 MiB) are read when the write fails.
	if n > 1<<20 || src.read > 4<<20 {
		t.Fatalf("wrote %d and read %d bytes for a 1 MiB tmpfs", n, src.read)
	}
	untouched()
}

// A write whose directory is renamed meanwhile still removes its
// temporary file when it fails (and commits into the renamed directory
// when it succeeds): it holds the directory, not its name.
func TestWriterFollowsItsDirectory(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	base := t.TempDir()
	dir, moved := filepath.Join(base, "d"), filepath.Join(base, "d2")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	aborted, err := m.Create("", filepath.Join(dir, "a"), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	committed, err := m.Create("", filepath.Join(dir, "b"), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	aborted.Write([]byte("gone"))
	aborted.Abort()
	committed.Write([]byte("kept"))
	if _, err := committed.Commit(); err != nil {
		t.Fatal(err)
	}
	if left := temps(t, moved); len(left) > 0 {
		t.Fatalf("temporary files left in the renamed directory: %v", left)
	}
	if got := readFile(t, filepath.Join(moved, "b")); got != "kept" {
		t.Fatalf("the committed file holds %q", got)
	}
}
