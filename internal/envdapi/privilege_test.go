package envdapi_test

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/rayito/rayito-agent/internal/envdapi/gen/filesystem"
)

// The privilege escalation of the envd surface, shut: a program running
// as nobody points symlinks in a directory of its own at root's
// directory and file; a token holder's file operations for nobody, who is
// not in the admin group, run with nobody's rights and go nowhere nobody
// could go. Root's directory gets no entry, root's file keeps its
// content, nothing of root's is moved, removed or given away.
func TestFilesForAnUnprivilegedUserFollowNoSymlinkIntoRoots(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{adminGroup: "none"})
	ctx := ctxLong(t)
	home := openTree(t) // nobody may write here, as in their home
	rootDir := filepath.Join(t.TempDir(), "root-owned")
	mustWrite(t, filepath.Join(rootDir, "config"), "root's")
	searchable(t, rootDir)
	for link, target := range map[string]string{"proj": rootDir, "out.txt": filepath.Join(rootDir, "config")} {
		if err := os.Symlink(target, filepath.Join(home, link)); err != nil {
			t.Fatal(err)
		}
	}
	upload := func(path string) int {
		status, _, _ := filesCall(t, a, "POST", url.Values{"path": {path}, "username": {"nobody"}}, "application/octet-stream", strings.NewReader("nobody's"))
		return status
	}
	if s := upload(filepath.Join(home, "proj", "setup.sh")); s != 403 {
		t.Errorf("upload through a link into root's directory: %d, want 403", s)
	}
	if s := upload(filepath.Join(home, "out.txt")); s != 403 {
		t.Errorf("upload through a link to root's file: %d, want 403", s)
	}
	if s := upload(filepath.Join(home, "proj", "new", "deeper", "f")); s != 403 {
		t.Errorf("upload with parents through a link into root's directory: %d, want 403", s)
	}
	_, err := a.fs.MakeDir(ctx, as("nobody", connect.NewRequest(&filesystem.MakeDirRequest{Path: filepath.Join(home, "proj", "d")})))
	wantCode(t, err, connect.CodePermissionDenied, "")
	_, err = a.fs.Move(ctx, as("nobody", connect.NewRequest(&filesystem.MoveRequest{Source: filepath.Join(home, "proj", "config"), Destination: filepath.Join(home, "stolen")})))
	wantCode(t, err, connect.CodePermissionDenied, "")
	_, err = a.fs.Remove(ctx, as("nobody", connect.NewRequest(&filesystem.RemoveRequest{Path: filepath.Join(home, "proj", "config")})))
	wantCode(t, err, connect.CodePermissionDenied, "")
	// A root-only file is not read for nobody either.
	if status, _, _ := filesCall(t, a, "GET", url.Values{"path": {closedFile(t)}, "username": {"nobody"}}, "", nil); status != 403 {
		t.Errorf("a root-only file for nobody: %d, want 403", status)
	}

	entries, _ := os.ReadDir(rootDir)
	if len(entries) != 1 || uidOf(t, rootDir) != 0 || uidOf(t, filepath.Join(rootDir, "config")) != 0 {
		t.Errorf("root's directory now has %d entries (owner %d)", len(entries), uidOf(t, rootDir))
	}
	if b, _ := os.ReadFile(filepath.Join(rootDir, "config")); string(b) != "root's" {
		t.Errorf("root's file now holds %q", b)
	}
	// What nobody may do still works, and makes nobody's files.
	if s := upload(filepath.Join(home, "mine", "f")); s != 200 || uidOf(t, filepath.Join(home, "mine", "f")) != 65534 {
		t.Errorf("upload into nobody's own directory: %d", s)
	}
}
