package endpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/rayito/rayito-agent/internal/wire"
	"golang.org/x/sys/unix"
)

// openTree makes dir usable by nobody: searchable parents, writable dir.
func openTree(t *testing.T, dir string) {
	t.Helper()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		mode := os.FileMode(0o755)
		if d == dir {
			mode = 0o777
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFileOps runs each metadata op over the websocket.
func TestFileOps(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	dir := t.TempDir()
	f := filepath.Join(dir, "a.txt")
	os.WriteFile(f, []byte("hello"), 0o644)

	st := result(t, rc.call(map[string]any{"op": "file_stat", "path": f}))
	if st["type"] != "file" || st["size"] != float64(5) || st["permissions"] != "-rw-r--r--" || st["mode"] != float64(0o644) ||
		st["owner"] != "root" || st["group"] != "root" || st["name"] != "a.txt" || st["path"] != f || st["mtime_unix_ms"].(float64) <= 0 {
		t.Fatalf("file_stat: %v", st)
	}
	mk := result(t, rc.call(map[string]any{"op": "file_mkdir", "path": filepath.Join(dir, "d/e")}))
	if mk["created"] != true {
		t.Fatalf("file_mkdir: %v", mk)
	}
	if mk := result(t, rc.call(map[string]any{"op": "file_mkdir", "path": filepath.Join(dir, "d/e")})); mk["created"] != false {
		t.Fatalf("file_mkdir of an existing directory: %v", mk)
	}
	os.Symlink("a.txt", filepath.Join(dir, "link"))
	ls := result(t, rc.call(map[string]any{"op": "file_list", "path": dir, "depth": 2}))
	var names []string
	for _, e := range ls["entries"].([]any) {
		e := e.(map[string]any)
		names = append(names, e["name"].(string)+":"+e["type"].(string))
		if e["name"] == "link" && e["symlink_target"] != "a.txt" {
			t.Fatalf("symlink entry: %v", e)
		}
	}
	if got := filepath.Join(names...); got != "a.txt:file/d:dir/e:dir/link:symlink" {
		t.Fatalf("file_list: %v", names)
	}
	rc.call(map[string]any{"op": "file_move", "from": f, "to": filepath.Join(dir, "d/b.txt")})
	if b, _ := os.ReadFile(filepath.Join(dir, "d/b.txt")); string(b) != "hello" {
		t.Fatal("file_move did not move")
	}
	rc.call(map[string]any{"op": "file_chmod", "path": filepath.Join(dir, "d/b.txt"), "mode": "600"})
	rc.call(map[string]any{"op": "file_chown", "path": filepath.Join(dir, "d/b.txt"), "owner": "nobody"})
	st = result(t, rc.call(map[string]any{"op": "file_stat", "path": filepath.Join(dir, "d/b.txt")}))
	if st["permissions"] != "-rw-------" || st["owner"] != "nobody" {
		t.Fatalf("after chmod and chown: %v", st)
	}
	rc.call(map[string]any{"op": "file_chmod", "path": filepath.Join(dir, "d/b.txt"), "mode": 0o640})
	if st := result(t, rc.call(map[string]any{"op": "file_stat", "path": filepath.Join(dir, "d/b.txt")})); st["mode"] != float64(0o640) {
		t.Fatalf("numeric chmod: %v", st)
	}
	result(t, rc.call(map[string]any{"op": "file_remove", "path": filepath.Join(dir, "d"), "recursive": true}))
	if _, err := os.Stat(filepath.Join(dir, "d")); err == nil {
		t.Fatal("file_remove left the tree")
	}
}

// TestFileOpErrors: each file op's error paths, with their codes.
func TestFileOpErrors(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	dir := t.TempDir()
	openTree(t, dir)
	private := filepath.Join(dir, "private")
	os.Mkdir(private, 0o700)
	os.WriteFile(filepath.Join(private, "secret"), []byte("s"), 0o600)
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	os.MkdirAll(filepath.Join(dir, "full/x"), 0o755)
	cases := []struct {
		name string
		req  map[string]any
		code string
	}{
		{"stat missing", map[string]any{"op": "file_stat", "path": filepath.Join(dir, "nope")}, "not_found"},
		{"stat no path", map[string]any{"op": "file_stat"}, "bad_request"},
		{"stat NUL", map[string]any{"op": "file_stat", "path": "/tmp/a\x00b"}, "bad_request"},
		{"stat unknown user", map[string]any{"op": "file_stat", "path": dir, "user": "no-such-user-xyz"}, "bad_request"},
		{"stat as nobody", map[string]any{"op": "file_stat", "path": filepath.Join(private, "secret"), "user": "nobody"}, "permission_denied"},
		{"stat bad param", map[string]any{"op": "file_stat", "path": dir, "recursive": true}, "bad_request"},
		{"list a file", map[string]any{"op": "file_list", "path": file}, "bad_request"},
		{"list missing", map[string]any{"op": "file_list", "path": filepath.Join(dir, "nope")}, "not_found"},
		{"list too deep", map[string]any{"op": "file_list", "path": dir, "depth": 17}, "bad_request"},
		{"list negative depth", map[string]any{"op": "file_list", "path": dir, "depth": -1}, "bad_request"},
		{"list /root as nobody", map[string]any{"op": "file_list", "path": "/root", "user": "nobody"}, "permission_denied"},
		{"mkdir file in the way", map[string]any{"op": "file_mkdir", "path": file}, "conflict"},
		{"mkdir below a file", map[string]any{"op": "file_mkdir", "path": filepath.Join(file, "sub")}, "bad_request"},
		{"mkdir existing, no parents", map[string]any{"op": "file_mkdir", "path": dir, "parents": false}, "conflict"},
		{"mkdir missing parent", map[string]any{"op": "file_mkdir", "path": filepath.Join(dir, "a/b"), "parents": false}, "not_found"},
		{"mkdir as nobody", map[string]any{"op": "file_mkdir", "path": filepath.Join(private, "d"), "user": "nobody"}, "permission_denied"},
		{"move missing", map[string]any{"op": "file_move", "from": filepath.Join(dir, "nope"), "to": filepath.Join(dir, "x")}, "not_found"},
		{"move without to", map[string]any{"op": "file_move", "from": file}, "bad_request"},
		{"move onto a full dir", map[string]any{"op": "file_move", "from": private, "to": filepath.Join(dir, "full")}, "conflict"},
		{"remove missing", map[string]any{"op": "file_remove", "path": filepath.Join(dir, "nope")}, "not_found"},
		{"remove non-empty", map[string]any{"op": "file_remove", "path": filepath.Join(dir, "full")}, "conflict"},
		{"remove /", map[string]any{"op": "file_remove", "path": "/", "recursive": true}, "bad_request"},
		{"remove as nobody", map[string]any{"op": "file_remove", "path": filepath.Join(private, "secret"), "user": "nobody"}, "permission_denied"},
		{"chmod no mode", map[string]any{"op": "file_chmod", "path": file}, "bad_request"},
		{"chmod bad mode", map[string]any{"op": "file_chmod", "path": file, "mode": "rwx"}, "bad_request"},
		{"chmod huge mode", map[string]any{"op": "file_chmod", "path": file, "mode": 0o17777}, "bad_request"},
		{"chmod as nobody", map[string]any{"op": "file_chmod", "path": file, "mode": 0o777, "user": "nobody"}, "permission_denied"},
		{"chown nothing", map[string]any{"op": "file_chown", "path": file}, "bad_request"},
		{"chown unknown owner", map[string]any{"op": "file_chown", "path": file, "owner": "no-such-user-xyz"}, "bad_request"},
		{"chown as nobody", map[string]any{"op": "file_chown", "path": file, "owner": "nobody", "user": "nobody"}, "permission_denied"},
		{"read missing", map[string]any{"op": "file_read", "path": filepath.Join(dir, "nope")}, "not_found"},
		{"read a directory", map[string]any{"op": "file_read", "path": dir}, "bad_request"},
		{"read a device", map[string]any{"op": "file_read", "path": "/dev/zero"}, "bad_request"},
		{"read past the end", map[string]any{"op": "file_read", "path": file, "offset": 2}, "bad_request"},
		{"read negative length", map[string]any{"op": "file_read", "path": file, "length": -1}, "bad_request"},
		{"read as nobody", map[string]any{"op": "file_read", "path": filepath.Join(private, "secret"), "user": "nobody"}, "permission_denied"},
		{"read negative grace", map[string]any{"op": "file_read", "path": file, "grace_ms": -1}, "bad_request"},
		{"write a directory", map[string]any{"op": "file_write", "path": dir}, "bad_request"},
		{"write exclusive", map[string]any{"op": "file_write", "path": file, "exclusive": true}, "conflict"},
		{"write no parents", map[string]any{"op": "file_write", "path": filepath.Join(dir, "a/b"), "parents": false}, "not_found"},
		{"write into /proc", map[string]any{"op": "file_write", "path": "/proc/sys/kernel/hostname"}, "bad_request"},
		{"write into /sys", map[string]any{"op": "file_write", "path": "/sys/kernel/rayito"}, "bad_request"},
		{"write as nobody", map[string]any{"op": "file_write", "path": filepath.Join(private, "x"), "user": "nobody"}, "permission_denied"},
		{"write bad mode", map[string]any{"op": "file_write", "path": filepath.Join(dir, "m"), "mode": 99999}, "bad_request"},
	}
	for _, c := range cases {
		resp := rc.call(c.req)
		if got := errorCode(resp); got != c.code {
			t.Errorf("%s: got %v, want error %s", c.name, resp, c.code)
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "x" {
		t.Fatal("a refused op changed a file")
	}
	if resp := rc.call(map[string]any{"op": "list"}); resp["result"] == nil {
		t.Fatalf("connection broken after bad input: %v", resp)
	}
}

// TestFileRead downloads a file over the websocket: the data channel
// carries its bytes, the end its size.
func TestFileRead(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	p := filepath.Join(t.TempDir(), "data.bin")
	content := make([]byte, 3<<20+123)
	rand.New(rand.NewSource(3)).Read(content)
	os.WriteFile(p, content, 0o644)
	r := result(t, rc.call(map[string]any{"op": "file_read", "path": p, "offset": 100, "length": 2 << 20}))
	if r["size"] != float64(2<<20) || r["path"] != p {
		t.Fatalf("file_read: %v", r)
	}
	id := uint64(r["stream"].(float64))
	var got []byte
	for {
		m, d := rc.read()
		if d != nil {
			if d.Channel != wire.ChanData || d.Offset != uint64(len(got)) {
				t.Fatalf("frame on channel %d at %d after %d bytes", d.Channel, d.Offset, len(got))
			}
			got = append(got, d.Payload...)
			rc.send(map[string]any{"op": "ack", "stream": id, "cursors": map[string]int{"data": len(got)}})
			continue
		}
		if m["event"] == "end" {
			if m["reason"] != "done" || m["size"] != float64(2<<20) {
				t.Fatalf("end %v", m)
			}
			break
		}
	}
	if !bytes.Equal(got, content[100:100+2<<20]) {
		t.Fatal("downloaded bytes differ")
	}
}

// upload sends content as IN frames within the window, then close_stdin,
// and returns the end event.
func (rc *rawConn) upload(t *testing.T, id uint64, window int, content []byte) map[string]any {
	t.Helper()
	written, sent := 0, 0
	var end map[string]any
	for end == nil {
		for sent < len(content) && sent-written < window {
			n := min(256<<10, len(content)-sent, window-(sent-written))
			rc.sendRaw(websocket.MessageBinary, wire.AppendData(nil, wire.Data{Type: wire.In, Stream: id, Payload: content[sent : sent+n]}))
			sent += n
			if sent == len(content) {
				rc.send(map[string]any{"op": "close_stdin", "stream": id})
			}
		}
		m, _ := rc.read()
		switch {
		case m["event"] == "progress":
			written = int(m["written"].(float64))
			rc.send(map[string]any{"op": "ack", "stream": id, "cursors": map[string]any{"events": m["seq"]}})
		case m["event"] == "error":
			t.Fatalf("error event during a paced upload: %v", m)
		case m["event"] == "end":
			end = m
		}
	}
	return end
}

// TestFileWrite uploads over the websocket, pacing by progress events as
// the protocol says: never refused, and the end has the file's hash.
func TestFileWrite(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "sub/up.bin")
	content := make([]byte, 11<<20+7)
	rand.New(rand.NewSource(4)).Read(content)
	r := result(t, rc.call(map[string]any{"op": "file_write", "path": p, "mode": "640"}))
	window := int(r["window"].(float64))
	if window <= 0 || r["path"] != p {
		t.Fatalf("file_write: %v", r)
	}
	end := rc.upload(t, uint64(r["stream"].(float64)), window, content)
	sum := sha256.Sum256(content)
	if end["reason"] != "done" || end["size"] != float64(len(content)) || end["sha256"] != hex.EncodeToString(sum[:]) || end["created"] != true {
		t.Fatalf("end %v", end)
	}
	got, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	if !bytes.Equal(got, content) || st.Mode().Perm() != 0o640 {
		t.Fatalf("file on disk: %d bytes, mode %v", len(got), st.Mode())
	}
}

// TestFileWriteTakeOver: a second connection that attaches an upload takes
// over its input and learns how much arrived; the first is refused.
func TestFileWriteTakeOver(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	p := filepath.Join(t.TempDir(), "f")
	id := resultStream(t, rc.call(map[string]any{"op": "file_write", "path": p}))
	rc.sendRaw(websocket.MessageBinary, wire.AppendData(nil, wire.Data{Type: wire.In, Stream: id, Payload: []byte("hello ")}))
	// A connection's frames are taken in order, so once a later request
	// is answered the input has arrived; another connection's attach
	// could otherwise come first.
	result(t, rc.call(map[string]any{"op": "list"}))
	rc2 := a.dial(t)
	r := result(t, rc2.call(map[string]any{"op": "attach", "stream": id}))
	if r["received"] != float64(6) || r["kind"] != "file_write" {
		t.Fatalf("attach of an upload: %v", r)
	}
	rc.sendRaw(websocket.MessageBinary, wire.AppendData(nil, wire.Data{Type: wire.In, Stream: id, Payload: []byte("stale")}))
	for {
		m := rc.readControl()
		if m["event"] == "error" {
			if errorCode(m) != "conflict" {
				t.Fatalf("input from the old connection: %v", m)
			}
			break
		}
	}
	rc2.sendRaw(websocket.MessageBinary, wire.AppendData(nil, wire.Data{Type: wire.In, Stream: id, Payload: []byte("world")}))
	rc2.call(map[string]any{"op": "close_stdin", "stream": id})
	for {
		if m := rc2.readControl(); m["event"] == "end" {
			if m["reason"] != "done" || m["size"] != float64(11) {
				t.Fatalf("end %v", m)
			}
			break
		}
	}
	if b, _ := os.ReadFile(p); string(b) != "hello world" {
		t.Fatalf("file %q", b)
	}
}

// TestFileWriteFlood: a client that ignores the window either gets lucky
// (the agent kept up) or gets limit, and then the file is untouched; the
// file is never partly written. Whether the agent keeps up depends on the
// machine, so files.TestErrorCodes checks the limit code itself.
func TestFileWriteFlood(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("old"), 0o644)
	id := resultStream(t, rc.call(map[string]any{"op": "file_write", "path": p}))
	chunk := bytes.Repeat([]byte("z"), 1<<20)
	const chunks = 32
	for range chunks {
		rc.sendRaw(websocket.MessageBinary, wire.AppendData(nil, wire.Data{Type: wire.In, Stream: id, Payload: chunk}))
	}
	rc.send(map[string]any{"op": "close_stdin", "stream": id})
	var limited bool
	for {
		m, _ := rc.read()
		if m["event"] == "error" {
			limited = limited || errorCode(m) == "limit"
		}
		if m["event"] == "end" {
			b, _ := os.ReadFile(p)
			switch {
			case m["reason"] == "done" && !limited && len(b) == chunks<<20:
			case m["reason"] == "error" && m["code"] == "limit" && limited && string(b) == "old":
			default:
				t.Fatalf("end %v, limit error %v, file of %d bytes", m, limited, len(b))
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Fatalf("left in the directory: %v", entries)
			}
			return
		}
	}
}

// TestFileWriteNoSpace: an upload that fills its disk ends with code
// limit; the old file is intact and no temporary file is left.
func TestFileWriteNoSpace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	// By system call: a mount command's exit could be reaped by the
	// package's reaper before its Wait ("waitid: no child processes").
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("umount: %v", err)
		}
	})
	a := newTestAgent(t)
	rc := a.dial(t)
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("old"), 0o644)
	r := result(t, rc.call(map[string]any{"op": "file_write", "path": p}))
	end := rc.upload(t, uint64(r["stream"].(float64)), int(r["window"].(float64)), make([]byte, 3<<20))
	if end["reason"] != "error" || end["code"] != "limit" || !strings.Contains(end["message"].(string), "no space") {
		t.Fatalf("end %v", end)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("file %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("left %v", entries)
	}
}
