package files

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteTar(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "sub/empty"), 0o750)
	writeFile(t, filepath.Join(root, "a.txt"), "alpha")
	writeFile(t, filepath.Join(root, "sub/b.bin"), strings.Repeat("b", 100000))
	os.Symlink("../a.txt", filepath.Join(root, "sub/link"))
	var buf bytes.Buffer
	if err := m.WriteTar("", "", root, &buf); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&buf)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got = append(got, h.Name)
		switch h.Name {
		case "a.txt":
			if string(body) != "alpha" || h.Mode&0o777 != 0o644 || h.Uname != "root" {
				t.Fatalf("a.txt: %+v %q", h, body)
			}
		case "sub/b.bin":
			if len(body) != 100000 {
				t.Fatalf("b.bin: %d bytes", len(body))
			}
		case "sub/link":
			if h.Typeflag != tar.TypeSymlink || h.Linkname != "../a.txt" {
				t.Fatalf("link: %+v", h)
			}
		case "sub/empty/":
			if h.Typeflag != tar.TypeDir || h.Mode&0o777 != 0o750 {
				t.Fatalf("empty: %+v", h)
			}
		}
	}
	if strings.Join(got, " ") != "a.txt sub/ sub/b.bin sub/empty/ sub/link" {
		t.Fatalf("entries %q", got)
	}
	wantKind(t, m.WriteTar("", "", filepath.Join(root, "a.txt"), io.Discard), ErrNotDir)
	wantKind(t, m.WriteTar("", "", filepath.Join(root, "nope"), io.Discard), ErrNotFound)
}

// TestWriteTarUnreadable: an entry the user cannot read fails the archive
// before its end marker, so the reader sees it truncated.
func TestWriteTarUnreadable(t *testing.T) {
	t.Parallel()
	needRoot(t)
	m, _ := newManager(t)
	root := t.TempDir()
	openToAll(t, root)
	writeFile(t, filepath.Join(root, "a"), "a")
	writeFile(t, filepath.Join(root, "b"), "b")
	os.Chmod(filepath.Join(root, "b"), 0o600)
	var buf bytes.Buffer
	wantKind(t, m.WriteTar("", "nobody", root, &buf), ErrPermission)
	// Go's tar reader takes an archive cut at an entry boundary as
	// complete; the missing end marker (two zero blocks) is what tells.
	if b := buf.Bytes(); len(b) >= 1024 && bytes.Equal(b[len(b)-1024:], make([]byte, 1024)) {
		t.Fatal("a failed archive has its end marker")
	}
}

// A file swapped for a FIFO between the listing and the open (by a
// program of the user's, to hold the agent) fails the archive at once:
// the FIFO is never opened for reading, which would wait for a writer
// forever and hold one of the identity threads every operation as another
// user shares.
func TestTarNeverOpensASwappedFIFO(t *testing.T) {
	needRoot(t)
	t.Parallel()
	m, _ := newManager(t)
	root := t.TempDir()
	openToAll(t, root)
	regular := filepath.Join(root, "was-a-file")
	writeFile(t, regular, "content")
	info, err := os.Lstat(regular)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(regular)
	if err := mkfifo(regular); err != nil {
		t.Fatal(err)
	}
	os.Chmod(regular, 0o666)
	nobody, err := m.User("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	done := make(chan error, 1)
	go func() {
		done <- m.tarEntry("", nobody, tar.NewWriter(io.Discard), root, tarItem{path: regular, info: info})
	}()
	select {
	case err := <-done:
		wantKind(t, err, ErrNotRegular)
	case <-time.After(30 * time.Second):
		t.Fatal("the tar opened the FIFO and waits for a writer")
	}
}

// TestWriteTarListsAsTheUser: a directory the user may enter but not
// list (mode 0711) fails the archive, before any of its names goes out:
// listing it as the agent would stream names the user could never see.
func TestWriteTarListsAsTheUser(t *testing.T) {
	t.Parallel()
	needRoot(t)
	m, _ := newManager(t)
	root := t.TempDir()
	openToAll(t, root)
	hidden := filepath.Join(root, "hidden")
	os.Mkdir(hidden, 0o711)
	os.Chmod(hidden, 0o711)
	writeFile(t, filepath.Join(hidden, "secret-name.txt"), "x")
	os.Chmod(filepath.Join(hidden, "secret-name.txt"), 0o644)
	var buf bytes.Buffer
	wantKind(t, m.WriteTar("", "nobody", root, &buf), ErrPermission)
	if bytes.Contains(buf.Bytes(), []byte("secret-name.txt")) {
		t.Error("the archive names a file in a directory nobody may not list")
	}
}
