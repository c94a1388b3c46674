package files

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	if err := m.WriteTar("", root, &buf); err != nil {
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
	wantKind(t, m.WriteTar("", filepath.Join(root, "a.txt"), io.Discard), ErrNotDir)
	wantKind(t, m.WriteTar("", filepath.Join(root, "nope"), io.Discard), ErrNotFound)
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
	wantKind(t, m.WriteTar("nobody", root, &buf), ErrPermission)
	// Go's tar reader takes an archive cut at an entry boundary as
	// complete; the missing end marker (two zero blocks) is what tells.
	if b := buf.Bytes(); len(b) >= 1024 && bytes.Equal(b[len(b)-1024:], make([]byte, 1024)) {
		t.Fatal("a failed archive has its end marker")
	}
}
