package client_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

func randomBytes(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// leftovers lists temporary upload files in dir.
func leftovers(t testing.TB, dir string) []string {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if strings.Contains(e.Name(), ".rayito-") {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestFilesMetadata(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{})
	ctx := ctxLong(t)
	fsys := c.Files()
	dir := t.TempDir()
	must(t, fsys.MkdirAll(ctx, filepath.Join(dir, "a/b")))
	must(t, fsys.MkdirAll(ctx, filepath.Join(dir, "a/b")))
	must(t, fsys.WriteFile(ctx, filepath.Join(dir, "a/f.txt"), []byte("hi"), 0o640))
	info, err := fsys.Stat(ctx, filepath.Join(dir, "a/f.txt"))
	if err != nil || info.Type != client.FileTypeFile || info.Size != 2 || info.Mode != 0o640 || info.Permissions != "-rw-r-----" ||
		info.Owner != "root" || time.Since(info.ModTime) > time.Hour || info.IsDir() {
		t.Fatalf("stat: %+v, %v", info, err)
	}
	list, err := fsys.List(ctx, dir, 2)
	if err != nil || len(list) != 3 || list[0].Name != "a" || !list[0].IsDir() || list[1].Name != "b" || list[2].Name != "f.txt" {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if entry := list[2]; entry != info || !entry.ModTime.Equal(info.ModTime) {
		t.Fatalf("a listed entry %+v is not what stat says, %+v", entry, info)
	}
	var decoded client.FileInfo
	must(t, json.Unmarshal([]byte(`{"name":"f","path":"/f","type":"symlink","size":1,"mode":420,"permissions":"lrw-r--r--",`+
		`"owner":"o","group":"g","uid":7,"gid":8,"mtime_unix_ms":1764688000123,"symlink_target":"t"}`), &decoded))
	want := client.FileInfo{Name: "f", Path: "/f", Type: client.FileTypeSymlink, Size: 1, Mode: 0o644, Permissions: "lrw-r--r--",
		Owner: "o", Group: "g", UID: 7, GID: 8, ModTime: time.UnixMilli(1764688000123), SymlinkTarget: "t"}
	if decoded != want {
		t.Fatalf("decoded %+v, want %+v", decoded, want)
	}
	must(t, fsys.Move(ctx, filepath.Join(dir, "a/f.txt"), filepath.Join(dir, "g.txt")))
	must(t, fsys.Chmod(ctx, filepath.Join(dir, "g.txt"), 0o600|fs.ModeSetgid))
	must(t, fsys.Chown(ctx, filepath.Join(dir, "g.txt"), "nobody", ""))
	if info, _ := fsys.Stat(ctx, filepath.Join(dir, "g.txt")); info.Mode != 0o2600 || info.Owner != "nobody" {
		t.Fatalf("after chmod and chown: %+v", info)
	}
	must(t, fsys.Remove(ctx, filepath.Join(dir, "g.txt")))
	_, err = fsys.Stat(ctx, filepath.Join(dir, "g.txt"))
	if !errors.Is(err, fs.ErrNotExist) || !client.HasCode(err, client.CodeNotFound) {
		t.Fatalf("stat of a removed file: %v", err)
	}
	if err := fsys.Remove(ctx, filepath.Join(dir, "a")); !client.HasCode(err, client.CodeConflict) {
		t.Fatalf("remove of a non-empty directory: %v", err)
	}
	must(t, fsys.RemoveAll(ctx, filepath.Join(dir, "a")))
	must(t, fsys.RemoveAll(ctx, filepath.Join(dir, "a")))
	if err := fsys.MkdirAll(ctx, "/etc/passwd"); !client.HasCode(err, client.CodeConflict) {
		t.Fatalf("mkdir over a file: %v", err)
	}
	if _, err := fsys.As("nobody").List(ctx, "/root", 1); !errors.Is(err, fs.ErrPermission) || !client.HasCode(err, client.CodePermissionDenied) {
		t.Fatalf("nobody lists /root: %v", err)
	}
}

func TestFilesReadWrite(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{})
	fsys := c.Files()
	dir := t.TempDir()
	content := randomBytes(4<<20+3, 1)
	p := filepath.Join(dir, "sub/big.bin")
	w, err := fsys.Create(ctxLong(t), p, client.WriteOptions{Verify: true})
	must(t, err)
	if n, err := io.Copy(w, bytes.NewReader(content)); err != nil || n != int64(len(content)) {
		t.Fatalf("upload: %d, %v", n, err)
	}
	if _, err := os.Stat(p); err == nil {
		t.Fatal("the file is visible before Close")
	}
	must(t, w.Close())
	sum := sha256.Sum256(content)
	if path, size, hash, created := w.Committed(); path != p || size != int64(len(content)) || hash != hex.EncodeToString(sum[:]) || !created {
		t.Fatalf("committed %s %d %s %v", path, size, hash, created)
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, content) {
		t.Fatal("uploaded file differs")
	}
	got, err := fsys.ReadFile(ctxLong(t), p)
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("download: %d bytes, %v", len(got), err)
	}
	r, err := fsys.OpenRange(ctxLong(t), p, client.ReadOptions{Offset: 1000, Length: 5000})
	must(t, err)
	part, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(part, content[1000:6000]) || r.Size() != 5000 || r.Path() != p {
		t.Fatalf("range: %d bytes, %v", len(part), err)
	}
	if _, err := fsys.ReadFile(ctxLong(t), dir); !client.HasCode(err, client.CodeBadRequest) {
		t.Fatalf("reading a directory: %v", err)
	}
	if _, err := fsys.ReadFile(ctxLong(t), filepath.Join(dir, "nope")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("reading a missing file: %v", err)
	}
	w, err = fsys.Create(ctxLong(t), p, client.WriteOptions{Append: true})
	must(t, err)
	io.WriteString(w, "tail")
	must(t, w.Close())
	if got, _ := os.ReadFile(p); !bytes.Equal(got, append(content, "tail"...)) {
		t.Fatal("append")
	}
	if _, err := fsys.Create(ctxLong(t), p, client.WriteOptions{Exclusive: true}); !client.HasCode(err, client.CodeConflict) {
		t.Fatalf("exclusive create: %v", err)
	}
	if len(leftovers(t, filepath.Dir(p))) != 0 {
		t.Fatalf("temporary files left: %v", leftovers(t, filepath.Dir(p)))
	}
}

// TestFilesAbort: an aborted upload leaves the old file, and its
// temporary file goes at once, not after the grace.
func TestFilesAbort(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{})
	ctx := ctxLong(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("old"), 0o644)
	w, err := c.Files().Create(ctx, p, client.WriteOptions{})
	must(t, err)
	w.Write(randomBytes(1<<20, 2))
	must(t, w.Abort(ctx))
	if _, err := w.Write([]byte("x")); err == nil {
		t.Fatal("write after abort")
	}
	eventually(t, "the temporary file is removed", func() bool { return len(leftovers(t, dir)) == 0 })
	if got, _ := os.ReadFile(p); string(got) != "old" {
		t.Fatalf("file %q", got)
	}
}

// TestFilesSurviveCuts: a download and an upload go on across abrupt
// connection cuts (in-flight frames lost) and a host resume; both finish
// byte-exact.
func TestFilesSurviveCuts(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	proxy := newTCPProxy(t, strings.TrimPrefix(a.url, "ws://"))
	var reconnects atomic.Int32
	c := dialURL(t, proxy.url(), client.Options{OnReconnect: func(uint64) { reconnects.Add(1) }})
	ctx := ctxLong(t)
	dir := t.TempDir()
	down := randomBytes(24<<20, 3)
	os.WriteFile(filepath.Join(dir, "down"), down, 0o644)
	up := randomBytes(24<<20, 4)

	r, err := c.Files().Open(ctx, filepath.Join(dir, "down"))
	must(t, err)
	w, err := c.Files().Create(ctx, filepath.Join(dir, "up"), client.WriteOptions{Verify: true})
	must(t, err)
	var wg sync.WaitGroup
	var got []byte
	var readErr, writeErr error
	var readN, wroteN atomic.Int64
	wg.Add(2)
	go func() {
		defer wg.Done()
		var buf bytes.Buffer
		_, readErr = io.Copy(io.MultiWriter(&buf, writerFunc(func(b []byte) { readN.Add(int64(len(b))) })), r)
		got = buf.Bytes()
	}()
	go func() {
		defer wg.Done()
		for off := 0; off < len(up) && writeErr == nil; off += 100 << 10 {
			_, writeErr = w.Write(up[off:min(off+100<<10, len(up))])
			wroteN.Store(int64(off))
		}
		if writeErr == nil {
			writeErr = w.Close()
		}
	}()
	// Cut twice while both are under way, then resume as a host would.
	for i, at := range []int64{4 << 20, 10 << 20} {
		eventually(t, "both transfers under way", func() bool { return readN.Load() > at && wroteN.Load() > at })
		if i == 0 {
			proxy.swallow.Store(true) // what the client sends now is lost
			time.Sleep(20 * time.Millisecond)
			proxy.swallow.Store(false)
		}
		proxy.cutAndWait(t, &reconnects)
	}
	eventually(t, "both transfers under way", func() bool { return readN.Load() > 16<<20 && wroteN.Load() > 16<<20 })
	if _, err := c.Resume(ctxLong(t), client.ResumeOptions{}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if readErr != nil || !bytes.Equal(got, down) {
		t.Fatalf("download: %d of %d bytes, %v", len(got), len(down), readErr)
	}
	if writeErr != nil {
		t.Fatalf("upload: %v", writeErr)
	}
	if onDisk, _ := os.ReadFile(filepath.Join(dir, "up")); sha256.Sum256(onDisk) != sha256.Sum256(up) {
		t.Fatalf("uploaded file differs (%d of %d bytes)", len(onDisk), len(up))
	}
	if reconnects.Load() < 3 {
		t.Fatalf("%d reconnects, want 3", reconnects.Load())
	}
}

func TestFilesDownloadTar(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{})
	ctx := ctxLong(t)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "x/y"), 0o755)
	os.WriteFile(filepath.Join(dir, "x/y/z"), []byte("zz"), 0o644)
	rc, err := c.Files().DownloadTar(ctx, dir)
	must(t, err)
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(t, err)
		names = append(names, h.Name)
	}
	if strings.Join(names, " ") != "x/ x/y/ x/y/z" {
		t.Fatalf("entries %v", names)
	}
	if _, err := c.Files().DownloadTar(ctx, filepath.Join(dir, "nope")); !client.HasCode(err, client.CodeNotFound) {
		t.Fatalf("tar of a missing directory: %v", err)
	}
}
