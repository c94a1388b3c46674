package envdapi_test

import (
	"encoding/base64"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rayito/rayito-agent/internal/envdapi/gen/filesystem"
)

// as names the request's user the way the SDK does.
func as[T any](user string, req *connect.Request[T]) *connect.Request[T] {
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	return authed(req)
}

// openTree is a directory anyone may write, for requests as nobody.
func openTree(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	searchable(t, filepath.Dir(dir))
	return dir
}

// searchable lets anyone through dir and its parents up to the temporary
// directory.
func searchable(t *testing.T, dir string) {
	t.Helper()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// closedFile is a file in a directory only root may enter.
func closedFile(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "closed")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	searchable(t, filepath.Dir(dir))
	f := filepath.Join(dir, "secret")
	if err := os.WriteFile(f, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func uidOf(t *testing.T, path string) uint32 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Uid
}

// Stat describes files, directories and symlinks the way the SDK maps
// them, and says not_found for what is missing.
func TestStat(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	ctx := ctxLong(t)
	dir := t.TempDir()
	f := filepath.Join(dir, "a.txt")
	mustWrite(t, f, "hello")
	os.Chmod(f, 0o640)
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	os.Chtimes(f, mtime, mtime)
	os.Symlink("a.txt", filepath.Join(dir, "link"))
	os.Symlink("nowhere", filepath.Join(dir, "dangling"))

	stat := func(user, path string) (*filesystem.EntryInfo, error) {
		req := authed(connect.NewRequest(&filesystem.StatRequest{Path: path}))
		if user != "" {
			req = as(user, req)
		}
		resp, err := a.fs.Stat(ctx, req)
		if err != nil {
			return nil, err
		}
		return resp.Msg.GetEntry(), nil
	}
	e, err := stat("", f)
	if err != nil {
		t.Fatal(err)
	}
	if e.GetName() != "a.txt" || e.GetPath() != f || e.GetType() != filesystem.FileType_FILE_TYPE_FILE || e.GetSize() != 5 ||
		e.GetMode() != 0o640 || e.GetPermissions() != "-rw-r-----" || e.GetOwner() != "root" || e.GetGroup() != "root" ||
		!e.GetModifiedTime().AsTime().Equal(mtime) || e.SymlinkTarget != nil {
		t.Fatalf("file: %v", e)
	}
	e, err = stat("", dir)
	if err != nil || e.GetType() != filesystem.FileType_FILE_TYPE_DIRECTORY || e.GetPermissions()[0] != 'd' {
		t.Fatalf("directory: %v, %v", e, err)
	}
	e, err = stat("", filepath.Join(dir, "link"))
	if err != nil || e.GetType() != filesystem.FileType_FILE_TYPE_SYMLINK || e.GetSymlinkTarget() != f || e.GetMode() != 0o640 ||
		e.GetPermissions()[0] != 'l' {
		t.Fatalf("symlink: %v, %v", e, err)
	}
	e, err = stat("", filepath.Join(dir, "dangling"))
	if err != nil || e.GetType() != filesystem.FileType_FILE_TYPE_SYMLINK || e.GetSymlinkTarget() != "nowhere" {
		t.Fatalf("dangling symlink: %v, %v", e, err)
	}
	// A relative path is relative to the user's home.
	e, err = stat("root", ".")
	if err != nil || e.GetPath() != "/root" {
		t.Fatalf("relative: %v, %v", e, err)
	}

	_, err = stat("", filepath.Join(dir, "missing"))
	wantCode(t, err, connect.CodeNotFound, "no such file")
	_, err = stat("", filepath.Join(f, "below"))
	wantCode(t, err, connect.CodeInvalidArgument, "not a directory")
	_, err = stat("", "")
	wantCode(t, err, connect.CodeInvalidArgument, "empty path")
	// With the agent's rights, as envd (root) has: a root-only file is
	// described to any user.
	if e, err := stat("nobody", closedFile(t)); err != nil || e.GetOwner() != "root" {
		t.Fatalf("stat of a root-only file for nobody: %v, %v", e, err)
	}
	_, err = stat("no-such-user-here", dir)
	wantCode(t, err, connect.CodeInvalidArgument, "no such user")
	req := authed(connect.NewRequest(&filesystem.StatRequest{Path: dir}))
	req.Header().Set("Authorization", "Basic !!!")
	_, err = a.fs.Stat(ctx, req)
	wantCode(t, err, connect.CodeInvalidArgument, "Basic")
}

// ListDir lists to the depth asked, depth first with names sorted, with
// paths under the path as given (a symlink to a directory is listed
// through).
func TestListDir(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	ctx := ctxLong(t)
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "b"), "")
	mustWrite(t, filepath.Join(dir, "a/x/deep"), "")
	mustWrite(t, filepath.Join(dir, "a/y"), "")
	os.Symlink(dir, filepath.Join(t.TempDir(), "linkdir"))

	list := func(path string, depth uint32) ([]string, error) {
		resp, err := a.fs.ListDir(ctx, authed(connect.NewRequest(&filesystem.ListDirRequest{Path: path, Depth: depth})))
		if err != nil {
			return nil, err
		}
		var out []string
		for _, e := range resp.Msg.GetEntries() {
			rel, _ := filepath.Rel(path, e.GetPath())
			if filepath.Base(e.GetPath()) != e.GetName() {
				t.Fatalf("entry %v: name and path disagree", e)
			}
			out = append(out, rel)
		}
		return out, nil
	}
	for _, c := range []struct {
		depth uint32
		want  []string
	}{
		{0, []string{"a", "b"}},
		{1, []string{"a", "b"}},
		{2, []string{"a", "a/x", "a/y", "b"}},
		{3, []string{"a", "a/x", "a/x/deep", "a/y", "b"}},
	} {
		got, err := list(dir, c.depth)
		if err != nil || !equalStrings(got, c.want) {
			t.Fatalf("depth %d: %v, %v; want %v", c.depth, got, err, c.want)
		}
	}
	link := filepath.Join(filepath.Dir(dir), "linked")
	os.Symlink(dir, link)
	if got, err := list(link, 1); err != nil || !equalStrings(got, []string{"a", "b"}) {
		t.Fatalf("through a symlink: %v, %v", got, err)
	}
	empty := t.TempDir()
	if got, err := list(empty, 1); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v, %v", got, err)
	}

	_, err := list(filepath.Join(dir, "missing"), 1)
	wantCode(t, err, connect.CodeNotFound, "")
	_, err = list(filepath.Join(dir, "b"), 1)
	wantCode(t, err, connect.CodeInvalidArgument, "not a directory")
	_, err = list(dir, 17)
	wantCode(t, err, connect.CodeInvalidArgument, "depth")
	resp, err := a.fs.ListDir(ctx, as("nobody", connect.NewRequest(&filesystem.ListDirRequest{Path: filepath.Dir(closedFile(t))})))
	if err != nil || len(resp.Msg.GetEntries()) != 1 {
		t.Fatalf("listing a root-only directory for nobody, as envd lists it: %v, %v", resp, err)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// MakeDir creates a directory with its parents as the user; an existing
// one is already_exists, which the SDK's makeDir turns into false.
func TestMakeDir(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	ctx := ctxLong(t)
	dir := openTree(t)
	mkdir := func(user, path string) (*filesystem.EntryInfo, error) {
		resp, err := a.fs.MakeDir(ctx, as(user, connect.NewRequest(&filesystem.MakeDirRequest{Path: path})))
		if err != nil {
			return nil, err
		}
		return resp.Msg.GetEntry(), nil
	}
	p := filepath.Join(dir, "x/y/z")
	e, err := mkdir("nobody", p)
	if err != nil {
		t.Fatal(err)
	}
	if e.GetPath() != p || e.GetName() != "z" || e.GetType() != filesystem.FileType_FILE_TYPE_DIRECTORY || e.GetOwner() != "nobody" {
		t.Fatalf("entry %v", e)
	}
	if uidOf(t, filepath.Join(dir, "x")) != 65534 || uidOf(t, p) != 65534 {
		t.Fatal("the directories are not the user's")
	}
	_, err = mkdir("nobody", p)
	wantCode(t, err, connect.CodeAlreadyExists, "already exists")
	mustWrite(t, filepath.Join(dir, "file"), "")
	_, err = mkdir("root", filepath.Join(dir, "file"))
	wantCode(t, err, connect.CodeInvalidArgument, "not a directory")
	_, err = mkdir("root", filepath.Join(dir, "file/below"))
	wantCode(t, err, connect.CodeInvalidArgument, "not a directory")
	// In a root-only directory too, as envd does: created for nobody.
	created := filepath.Join(filepath.Dir(closedFile(t)), "new/deeper")
	if _, err = mkdir("nobody", created); err != nil || uidOf(t, created) != 65534 || uidOf(t, filepath.Dir(created)) != 65534 || uidOf(t, filepath.Dir(filepath.Dir(created))) != 0 {
		t.Fatalf("mkdir in a root-only directory for nobody: %v", err)
	}
	_, err = mkdir("root", "")
	wantCode(t, err, connect.CodeInvalidArgument, "empty path")
}

// Move renames, making the destination's parents as envd does, and
// answers what is at the destination.
func TestMove(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	ctx := ctxLong(t)
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "a"), "A")
	move := func(from, to string) (*filesystem.EntryInfo, error) {
		resp, err := a.fs.Move(ctx, authed(connect.NewRequest(&filesystem.MoveRequest{Source: from, Destination: to})))
		if err != nil {
			return nil, err
		}
		return resp.Msg.GetEntry(), nil
	}
	to := filepath.Join(dir, "new/place/b")
	e, err := move(filepath.Join(dir, "a"), to)
	if err != nil {
		t.Fatal(err)
	}
	if e.GetPath() != to || e.GetName() != "b" || e.GetType() != filesystem.FileType_FILE_TYPE_FILE || e.GetSize() != 1 {
		t.Fatalf("entry %v", e)
	}
	if b, err := os.ReadFile(to); err != nil || string(b) != "A" {
		t.Fatalf("moved content %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); !os.IsNotExist(err) {
		t.Fatalf("source still there: %v", err)
	}

	_, err = move(filepath.Join(dir, "gone"), filepath.Join(dir, "elsewhere/x"))
	wantCode(t, err, connect.CodeNotFound, "")
	if _, err := os.Stat(filepath.Join(dir, "elsewhere")); !os.IsNotExist(err) {
		t.Fatalf("a failed move made directories: %v", err)
	}
	mustWrite(t, filepath.Join(dir, "full/x"), "")
	os.Mkdir(filepath.Join(dir, "d"), 0o755)
	_, err = move(filepath.Join(dir, "d"), filepath.Join(dir, "full"))
	wantCode(t, err, connect.CodeFailedPrecondition, "not empty")
	_, err = move(filepath.Join(dir, "d"), filepath.Join(dir, "d/inside"))
	wantCode(t, err, connect.CodeInvalidArgument, "")
	_, err = move("", to)
	wantCode(t, err, connect.CodeInvalidArgument, "empty path")
	// For nobody too, as envd: the parents it makes are nobody's, the
	// file keeps its owner.
	moved := filepath.Join(dir, "made/for/nobody")
	if _, err = a.fs.Move(ctx, as("nobody", connect.NewRequest(&filesystem.MoveRequest{Source: closedFile(t), Destination: moved}))); err != nil {
		t.Fatalf("move of a root-only file for nobody: %v", err)
	}
	if uidOf(t, moved) != 0 || uidOf(t, filepath.Dir(moved)) != 65534 || uidOf(t, filepath.Join(dir, "made")) != 65534 {
		t.Fatal("owners after a move for nobody: the file keeps root, the new parents are nobody's")
	}
}

// Remove removes files and whole trees; what is already gone is no error,
// as in envd.
func TestRemove(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	ctx := ctxLong(t)
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "f"), "")
	mustWrite(t, filepath.Join(dir, "tree/a/b"), "")
	remove := func(user, path string) error {
		_, err := a.fs.Remove(ctx, as(user, connect.NewRequest(&filesystem.RemoveRequest{Path: path})))
		return err
	}
	for _, p := range []string{"f", "tree", "never-was"} {
		if err := remove("root", filepath.Join(dir, p)); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if _, err := os.Lstat(filepath.Join(dir, p)); !os.IsNotExist(err) {
			t.Fatalf("%s still there: %v", p, err)
		}
	}
	secret := closedFile(t)
	if err := remove("nobody", secret); err != nil {
		t.Fatalf("remove of a root-only file for nobody, as envd removes it: %v", err)
	}
	if _, err := os.Stat(secret); !os.IsNotExist(err) {
		t.Fatalf("still there: %v", err)
	}
	wantCode(t, remove("root", "/"), connect.CodeInvalidArgument, "/")
	wantCode(t, remove("root", ""), connect.CodeInvalidArgument, "empty path")
}

// With include_entry each event carries the entry as it is when the event
// is sent; an entry that is gone has none.
func TestWatchDirEntries(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	dir := t.TempDir()
	ctx := ctxLong(t)
	w := watchDir(t, ctx, a, &filesystem.WatchDirRequest{Path: dir, IncludeEntry: true})
	mustWrite(t, filepath.Join(dir, "a"), "12345")
	var created *filesystem.FilesystemEvent
	for created == nil {
		if !w.Receive() {
			t.Fatalf("watch ended: %v", w.Err())
		}
		if ev := w.Msg().GetFilesystem(); ev.GetType() == filesystem.EventType_EVENT_TYPE_CREATE {
			created = ev
		}
	}
	if e := created.GetEntry(); e.GetName() != "a" || e.GetPath() != filepath.Join(dir, "a") || e.GetType() != filesystem.FileType_FILE_TYPE_FILE {
		t.Fatalf("create event %v", created)
	}
	if err := os.Remove(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	for {
		if !w.Receive() {
			t.Fatalf("watch ended: %v", w.Err())
		}
		if ev := w.Msg().GetFilesystem(); ev.GetType() == filesystem.EventType_EVENT_TYPE_REMOVE {
			if ev.Entry != nil {
				t.Fatalf("remove event with an entry: %v", ev)
			}
			break
		}
	}
}

// A file written through the API is replaced atomically (a temporary file
// renamed over it); a watch sees what envd's clients wait for, a create
// and a write of the file, and nothing of the temporary file.
func TestWatchDirAtomicWrite(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	dir := t.TempDir()
	ctx := ctxLong(t)
	w := watchDir(t, ctx, a, &filesystem.WatchDirRequest{Path: dir, IncludeEntry: true})
	target := filepath.Join(dir, "f.txt")
	for i, content := range []string{"new", "replaced!"} {
		status, _, raw := filesCall(t, a, "POST", url.Values{"path": {target}}, "application/octet-stream", strings.NewReader(content))
		wantWritten(t, status, raw, target)
		var got []string
		for len(got) < 2 {
			if !w.Receive() {
				t.Fatalf("watch ended: %v", w.Err())
			}
			ev := w.Msg().GetFilesystem()
			if ev == nil {
				continue
			}
			got = append(got, ev.GetType().String()+" "+ev.GetName())
			if ev.GetType() == filesystem.EventType_EVENT_TYPE_WRITE && ev.GetEntry().GetSize() != int64(len(content)) {
				t.Fatalf("write %d: entry %v", i, ev.GetEntry())
			}
		}
		if want := []string{"EVENT_TYPE_CREATE f.txt", "EVENT_TYPE_WRITE f.txt"}; !equalStrings(got, want) {
			t.Fatalf("write %d: events %v, want %v", i, got, want)
		}
	}
	// A plain rename in the directory stays a rename and a create.
	if err := os.Rename(target, filepath.Join(dir, "g.txt")); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 2 {
		if !w.Receive() {
			t.Fatalf("watch ended: %v", w.Err())
		}
		if ev := w.Msg().GetFilesystem(); ev != nil {
			got = append(got, ev.GetType().String()+" "+ev.GetName())
		}
	}
	if want := []string{"EVENT_TYPE_RENAME f.txt", "EVENT_TYPE_CREATE g.txt"}; !equalStrings(got, want) {
		t.Fatalf("rename: events %v, want %v", got, want)
	}
}
