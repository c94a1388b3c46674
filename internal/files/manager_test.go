package files

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestStat(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	for name, root := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			f := filepath.Join(root, "a.txt")
			writeFile(t, f, "hello")
			mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
			os.Chtimes(f, mtime, mtime)
			if err := os.Symlink("a.txt", filepath.Join(root, "link")); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o600); err != nil {
				t.Fatal(err)
			}
			info, err := m.Stat("", f)
			if err != nil {
				t.Fatal(err)
			}
			if info.Type != TypeFile || info.Size != 5 || info.Name != "a.txt" || info.Path != f ||
				info.Perm() != 0o644 || info.Permissions() != "-rw-r--r--" || info.Owner != "root" || info.Group != "root" ||
				!info.ModTime.Equal(mtime) {
				t.Fatalf("stat of a file: %+v", info)
			}
			link, err := m.Stat("", filepath.Join(root, "link"))
			if err != nil || link.Type != TypeSymlink || link.SymlinkTarget != "a.txt" || link.Permissions()[0] != 'l' {
				t.Fatalf("stat of a symlink: %+v, %v", link, err)
			}
			dir, err := m.Stat("", root+"/./")
			if err != nil || dir.Type != TypeDir || dir.Path != root || dir.Permissions()[0] != 'd' {
				t.Fatalf("stat of a directory: %+v, %v", dir, err)
			}
			fifo, err := m.Stat("", filepath.Join(root, "fifo"))
			if err != nil || fifo.Type != TypeOther || fifo.Permissions() != "prw-------" {
				t.Fatalf("stat of a fifo: %+v, %v", fifo, err)
			}
		})
	}
}

func TestStatErrors(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "f"), "")
	_, err := m.Stat("", filepath.Join(dir, "missing"))
	wantKind(t, err, ErrNotFound)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%v is not fs.ErrNotExist", err)
	}
	_, err = m.Stat("", filepath.Join(dir, "f", "below"))
	wantKind(t, err, ErrNotDir)
	_, err = m.Stat("", "a\x00b")
	wantKind(t, err, ErrInvalid)
	if !strings.Contains(err.Error(), "NUL") {
		t.Fatalf("message %q does not say what is wrong", err)
	}
	_, err = m.Stat("", "")
	wantKind(t, err, ErrInvalid)
	_, err = m.Stat("no-such-user-here", dir)
	wantKind(t, err, ErrUnknownUser)
}

// TestRelativePaths: a relative path is relative to the user's home.
func TestRelativePaths(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	u, err := m.User("")
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("rayito-files-test-missing-%d", time.Now().UnixNano())
	_, err = m.Stat("", name)
	var e *Error
	if !errors.As(err, &e) || e.Path != filepath.Join(u.Home, name) {
		t.Fatalf("relative path resolved to %v, want below %s", err, u.Home)
	}
}

func TestPermissionsString(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mode fs.FileMode
		want string
		perm uint32
	}{
		{0o644, "-rw-r--r--", 0o644},
		{fs.ModeDir | 0o755, "drwxr-xr-x", 0o755},
		{fs.ModeSetuid | 0o755, "-rwsr-xr-x", 0o4755},
		{fs.ModeSetgid | 0o640, "-rw-r-S---", 0o2640},
		{fs.ModeDir | fs.ModeSticky | 0o777, "drwxrwxrwt", 0o1777},
		{fs.ModeDir | fs.ModeSticky | 0o770, "drwxrwx--T", 0o1770},
		{fs.ModeSymlink | 0o777, "lrwxrwxrwx", 0o777},
		{fs.ModeDevice | fs.ModeCharDevice | 0o666, "crw-rw-rw-", 0o666},
		{fs.ModeDevice | 0o660, "brw-rw----", 0o660},
		{fs.ModeSocket | 0o755, "srwxr-xr-x", 0o755},
		{0, "----------", 0},
	}
	for _, c := range cases {
		i := Info{Mode: c.mode}
		if got := i.Permissions(); got != c.want {
			t.Errorf("%v: %q, want %q", c.mode, got, c.want)
		}
		if got := i.Perm(); got != c.perm {
			t.Errorf("%v: perm %o, want %o", c.mode, got, c.perm)
		}
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	for name, root := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			for _, d := range []string{"b/c/d", "a"} {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			writeFile(t, filepath.Join(root, "b/x"), "x")
			writeFile(t, filepath.Join(root, "b/c/d/deep"), "")
			outside := t.TempDir()
			writeFile(t, filepath.Join(outside, "secret"), "")
			os.Symlink(outside, filepath.Join(root, "b/out"))
			paths := func(infos []Info) string {
				var p []string
				for _, i := range infos {
					rel, _ := filepath.Rel(root, i.Path)
					p = append(p, rel)
				}
				return strings.Join(p, " ")
			}
			got, err := m.List("", root, 0)
			if err != nil || paths(got) != "a b" {
				t.Fatalf("depth 1: %q, %v", paths(got), err)
			}
			got, err = m.List("", root, 3)
			if err != nil || paths(got) != "a b b/c b/c/d b/out b/x" {
				t.Fatalf("depth 3: %q, %v", paths(got), err)
			}
			for _, i := range got {
				if i.Name == "out" && (i.Type != TypeSymlink || i.SymlinkTarget != outside) {
					t.Fatalf("symlink entry: %+v", i)
				}
				if i.Owner != "root" {
					t.Fatalf("owner of %s: %q", i.Path, i.Owner)
				}
			}
			got, err = m.List("", root, MaxDepth)
			if err != nil || paths(got) != "a b b/c b/c/d b/c/d/deep b/out b/x" {
				t.Fatalf("depth %d: %q, %v", MaxDepth, paths(got), err)
			}
			// The listed directory itself may be a symlink.
			got, err = m.List("", filepath.Join(root, "b/out"), 1)
			if err != nil || len(got) != 1 || got[0].Path != filepath.Join(root, "b/out/secret") {
				t.Fatalf("list through a symlink: %+v, %v", got, err)
			}
			_, err = m.List("", root, MaxDepth+1)
			wantKind(t, err, ErrInvalid)
			_, err = m.List("", filepath.Join(root, "b/x"), 1)
			wantKind(t, err, ErrNotDir)
			_, err = m.List("", filepath.Join(root, "nope"), 1)
			wantKind(t, err, ErrNotFound)
		})
	}
}

// TestThousandFiles: 1,000 small files are listed, then removed with
// their directory.
func TestThousandFiles(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	for name, root := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(root, "many")
			if err := m.MakeDir("", dir, true); err != nil {
				t.Fatal(err)
			}
			for i := range 1000 {
				writeFile(t, filepath.Join(dir, fmt.Sprintf("f%04d", i)), "data")
			}
			got, err := m.List("", dir, 1)
			if err != nil || len(got) != 1000 {
				t.Fatalf("listed %d, %v", len(got), err)
			}
			for i, info := range got {
				if info.Name != fmt.Sprintf("f%04d", i) || info.Size != 4 || info.Type != TypeFile {
					t.Fatalf("entry %d: %+v", i, info)
				}
			}
			err = m.Remove("", dir, false)
			wantKind(t, err, ErrNotEmpty)
			if err := m.Remove("", dir, true); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("directory still there: %v", err)
			}
		})
	}
}

func TestMakeDir(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "file"), "")
	if err := m.MakeDir("", filepath.Join(root, "a/b/c"), true); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(root, "a/b/c")); err != nil || !st.IsDir() || st.Mode().Perm() != 0o755 {
		t.Fatalf("made %v, %v (want 0755 from the umask 022)", st, err)
	}
	err := m.MakeDir("", filepath.Join(root, "a/b/c"), true)
	wantKind(t, err, ErrExists)
	if errors.Is(err, ErrNotDir) {
		t.Fatalf("an existing directory reported as a file in the way: %v", err)
	}
	err = m.MakeDir("", filepath.Join(root, "file"), true)
	wantKind(t, err, ErrExists)
	wantKind(t, err, ErrNotDir)
	err = m.MakeDir("", filepath.Join(root, "file/sub"), true)
	wantKind(t, err, ErrNotDir)
	err = m.MakeDir("", filepath.Join(root, "x/y"), false)
	wantKind(t, err, ErrNotFound)
	if err := m.MakeDir("", filepath.Join(root, "x"), false); err != nil {
		t.Fatal(err)
	}
	err = m.MakeDir("", "/proc/rayito-test", true)
	if err == nil {
		t.Fatal("made a directory in /proc")
	}
}

func TestRemove(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "f"), "")
	os.Mkdir(filepath.Join(root, "empty"), 0o755)
	target := t.TempDir()
	writeFile(t, filepath.Join(target, "keep"), "")
	os.Symlink(target, filepath.Join(root, "link"))
	for _, p := range []string{"f", "empty", "link"} {
		if err := m.Remove("", filepath.Join(root, p), false); err != nil {
			t.Fatalf("remove %s: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(target, "keep")); err != nil {
		t.Fatalf("removing a symlink touched its target: %v", err)
	}
	wantKind(t, m.Remove("", filepath.Join(root, "f"), false), ErrNotFound)
	wantKind(t, m.Remove("", "/", true), ErrInvalid)
	wantKind(t, m.Remove("", "/..", true), ErrInvalid)
}

func TestChmodChown(t *testing.T) {
	t.Parallel()
	needRoot(t)
	m, _ := newManager(t)
	root := t.TempDir()
	f := filepath.Join(root, "f")
	writeFile(t, f, "")
	if err := m.Chmod("", f, 0o4750); err != nil {
		t.Fatal(err)
	}
	info, _ := m.Stat("", f)
	if info.Permissions() != "-rwsr-x---" {
		t.Fatalf("after chmod: %s", info.Permissions())
	}
	wantKind(t, m.Chmod("", f, 0o10000), ErrInvalid)
	wantKind(t, m.Chmod("", filepath.Join(root, "nope"), 0o644), ErrNotFound)
	if err := m.Chown("", f, "nobody", "nogroup"); err != nil {
		t.Fatal(err)
	}
	info, _ = m.Stat("", f)
	if info.Owner != "nobody" || info.Group != "nogroup" {
		t.Fatalf("after chown: %s:%s", info.Owner, info.Group)
	}
	if err := m.Chown("", f, "", "0"); err != nil {
		t.Fatal(err)
	}
	info, _ = m.Stat("", f)
	if info.Owner != "nobody" || info.Group != "root" {
		t.Fatalf("after chown of the group alone: %s:%s", info.Owner, info.Group)
	}
	wantKind(t, m.Chown("", f, "", ""), ErrInvalid)
	wantKind(t, m.Chown("", f, "4294967295", ""), ErrInvalid)
	wantKind(t, m.Chown("", f, "", "4294967295"), ErrInvalid)
	wantKind(t, m.Chown("", f, "no-such-user-here", ""), ErrUnknownUser)
	wantKind(t, m.Chown("", f, "", "no-such-group-here"), ErrUnknownUser)
	// nobody owns f but may not give it away.
	openToAll(t, root)
	wantKind(t, m.Chown("nobody", f, "root", ""), ErrPermission)
}

// TestStatResolved: a symlink's Info says where it leads once every link
// is followed, and nothing for a link that leads nowhere.
func TestStatResolved(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	root := t.TempDir()
	os.Mkdir(filepath.Join(root, "dir"), 0o750)
	writeFile(t, filepath.Join(root, "dir/f"), "12345")
	os.Chmod(filepath.Join(root, "dir/f"), 0o640)
	os.Symlink("dir/f", filepath.Join(root, "tofile"))
	os.Symlink("tofile", filepath.Join(root, "chain"))
	os.Symlink(filepath.Join(root, "dir"), filepath.Join(root, "todir"))
	os.Symlink("nowhere", filepath.Join(root, "dangling"))
	os.Symlink("loop", filepath.Join(root, "loop"))
	for link, want := range map[string]struct {
		path string
		typ  Type
		perm uint32
	}{
		"tofile": {filepath.Join(root, "dir/f"), TypeFile, 0o640},
		"chain":  {filepath.Join(root, "dir/f"), TypeFile, 0o640},
		"todir":  {filepath.Join(root, "dir"), TypeDir, 0o750},
	} {
		info, err := m.Stat("", filepath.Join(root, link))
		if err != nil {
			t.Fatal(err)
		}
		r := info.Resolved
		if info.Type != TypeSymlink || r == nil || r.Path != want.path || r.Type != want.typ || r.Perm() != want.perm || r.Owner != "root" {
			t.Fatalf("%s: %+v resolved to %+v, want %+v", link, info, r, want)
		}
	}
	for _, link := range []string{"dangling", "loop"} {
		info, err := m.Stat("", filepath.Join(root, link))
		if err != nil || info.Type != TypeSymlink || info.Resolved != nil {
			t.Fatalf("%s: %+v, %v", link, info, err)
		}
	}
	list, err := m.List("", root, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		if (e.Type == TypeSymlink && e.Name != "dangling" && e.Name != "loop") != (e.Resolved != nil) {
			t.Fatalf("listed %s: resolved %+v", e.Name, e.Resolved)
		}
	}
	if f, _ := m.Stat("", filepath.Join(root, "dir/f")); f.Resolved != nil {
		t.Fatal("a file has a Resolved")
	}
}
