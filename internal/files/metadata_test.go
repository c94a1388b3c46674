package files

import (
	"io"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// write writes content with metadata through a Writer.
func writeWith(t *testing.T, m *Manager, path, content string, md map[string]string) error {
	t.Helper()
	w, err := m.Create("", path, WriteOptions{Metadata: md})
	if err != nil {
		return err
	}
	io.WriteString(w, content)
	_, err = w.Commit()
	return err
}

// Metadata is stored with a written file, seen by Stat and List, kept by
// renames (across filesystems too), and replaced by the next write.
func TestMetadata(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	fss := filesystems(t)
	p := filepath.Join(fss["disk"], "f")
	md := map[string]string{"author": "mish", "purpose": "up load", "empty": ""}
	if err := writeWith(t, m, p, "x", md); err != nil {
		t.Fatal(err)
	}
	withMD := InfoOptions{Metadata: true}
	info, err := m.StatWith("", p, withMD)
	if plain, _ := m.Stat("", p); plain.Metadata != nil {
		t.Fatalf("metadata read without asking: %v", plain.Metadata)
	}
	if err != nil || !maps.Equal(info.Metadata, md) {
		t.Fatalf("stat: %v, %v", info.Metadata, err)
	}
	if list, err := m.ListWith("", fss["disk"], 1, withMD); err != nil || len(list) != 1 || !maps.Equal(list[0].Metadata, md) {
		t.Fatalf("list: %+v, %v", list, err)
	}
	// Set by other tools, in the same namespace; other namespaces are not
	// metadata.
	unix.Setxattr(p, "user.e2b.tool", []byte("setfattr"), 0)
	unix.Setxattr(p, "user.other", []byte("no"), 0)
	if info, _ = m.StatWith("", p, withMD); info.Metadata["tool"] != "setfattr" || len(info.Metadata) != 4 {
		t.Fatalf("after setxattr: %v", info.Metadata)
	}
	moved := filepath.Join(fss["tmpfs"], "moved")
	if err := m.Move("", p, moved); err != nil {
		t.Fatal(err)
	}
	if info, _ = m.StatWith("", moved, withMD); info.Metadata["author"] != "mish" || info.Metadata["tool"] != "setfattr" {
		t.Fatalf("after a move across filesystems: %v", info.Metadata)
	}
	if err := writeWith(t, m, moved, "y", nil); err != nil {
		t.Fatal(err)
	}
	if info, _ = m.StatWith("", moved, withMD); info.Metadata != nil {
		t.Fatalf("a rewrite kept the old metadata: %v", info.Metadata)
	}
	big := strings.Repeat("v", 70000)
	if err := writeWith(t, m, moved, "z", map[string]string{"big": big[:maxMetadataValue]}); err != nil {
		t.Fatal(err)
	}
	if info, _ = m.StatWith("", moved, withMD); info.Metadata["big"] != big[:maxMetadataValue] {
		t.Fatalf("a 64 KiB value came back as %d bytes", len(info.Metadata["big"]))
	}

	// ext4 keeps about 4 KiB of attributes a file (unless it has the
	// ea_inode feature): refused as too much, not as a full disk.
	if err := writeWith(t, m, filepath.Join(fss["disk"], "g"), "x", map[string]string{"big": big[:maxMetadataValue]}); err != nil {
		wantKind(t, err, ErrInvalid)
	}
	for _, bad := range []map[string]string{{"": "v"}, {"a\x00b": "v"}, {strings.Repeat("k", 247): "v"}, {"k": big}} {
		wantKind(t, writeWith(t, m, moved, "never", bad), ErrInvalid)
	}
	if readFile(t, moved) != "z" {
		t.Fatal("a refused write changed the file")
	}
	if left := temps(t, fss["tmpfs"]); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}
