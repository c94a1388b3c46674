package resume

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestRenewMachineID: a clone's machine id is new where the file is the
// file; a symlink (D-Bus's copy pointing at /etc's, or at nothing) is
// left as it is, its target neither written nor created.
func TestRenewMachineID(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "machine-id")
	target := filepath.Join(dir, "target")
	link := filepath.Join(dir, "dbus-machine-id")
	dangling := filepath.Join(dir, "dangling-machine-id")
	missing := filepath.Join(dir, "missing")
	const old = "0123456789abcdef0123456789abcdef\n"
	for _, f := range []string{file, target} {
		if err := os.WriteFile(f, []byte(old), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(missing, dangling); err != nil {
		t.Fatal(err)
	}
	saved := machineIDFiles
	machineIDFiles = []string{file, link, dangling, filepath.Join(dir, "absent")}
	defer func() { machineIDFiles = saved }()

	id, err := RenewMachineID()
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) || id+"\n" == old {
		t.Fatalf("new id %q", id)
	}
	if b, _ := os.ReadFile(file); string(b) != id+"\n" {
		t.Fatalf("the machine-id file holds %q, want the new id %q", b, id)
	}
	if st, _ := os.Stat(file); st.Mode().Perm() != 0o644 {
		t.Fatalf("the machine-id file's mode became %v", st.Mode().Perm())
	}
	if b, _ := os.ReadFile(target); string(b) != old {
		t.Fatalf("a symlink's target was written through: it holds %q", b)
	}
	if _, err := os.Lstat(missing); err == nil {
		t.Fatal("a dangling symlink's target was created")
	}
	for _, l := range []string{link, dangling} {
		if st, err := os.Lstat(l); err != nil || st.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("%s is no longer a symlink", l)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "absent")); err == nil {
		t.Fatal("a machine-id file that did not exist was created")
	}
}
