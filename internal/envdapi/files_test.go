package envdapi_test

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/json"
	"io"
	"maps"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/rayito/rayito-agent/internal/envdapi/gen/filesystem"
	"github.com/rayito/rayito-agent/internal/files"
	"github.com/rayito/rayito-agent/internal/files/filestest"
	"golang.org/x/sys/unix"
)

// filesCall sends one /files request with the token and returns the
// status, the headers and the body.
func filesCall(t *testing.T, a *agent, method string, q url.Values, ctype string, body io.Reader, headers ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, a.url+"/files?"+q.Encode(), body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Access-Token", nativeToken)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, raw
}

// wantFilesError fails unless the answer is envd's error shape with status
// and a message containing msg.
func wantFilesError(t *testing.T, what string, status int, raw []byte, want int, msg string) {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if status != want || json.Unmarshal(raw, &e) != nil || e.Code != want || !strings.Contains(e.Message, msg) {
		t.Fatalf("%s: %d %s, want %d with %q", what, status, raw, want, msg)
	}
}

type written struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Type string `json:"type"`
}

func wantWritten(t *testing.T, status int, raw []byte, paths ...string) {
	t.Helper()
	var got []written
	if status != http.StatusOK || json.Unmarshal(raw, &got) != nil || len(got) != len(paths) {
		t.Fatalf("upload: %d %s, want %v", status, raw, paths)
	}
	for i, p := range paths {
		if got[i] != (written{Name: filepath.Base(p), Path: p, Type: "file"}) {
			t.Fatalf("upload answered %+v, want %s", got[i], p)
		}
	}
}

func wantContent(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || string(b) != want {
		t.Fatalf("%s holds %q, %v; want %q", path, b, err, want)
	}
}

// multipartBody builds a form: pairs of field name and filename, each
// with its content.
func multipartBody(t *testing.T, parts ...[3]string) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		disp := `form-data; name="` + p[0] + `"`
		if p[1] != "" {
			disp += `; filename="` + p[1] + `"`
		}
		h.Set("Content-Disposition", disp)
		h.Set("Content-Type", "application/octet-stream")
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(p[2]))
	}
	mw.Close()
	return mw.FormDataContentType(), &buf
}

// GET /files sends a file's bytes with their length; what is not a
// regular file the user may read gets envd's error shape.
func TestFilesDownload(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	dir := t.TempDir()
	data := make([]byte, 3<<20)
	rand.Read(data)
	f := filepath.Join(dir, "blob.bin")
	if err := os.WriteFile(f, data, 0o644); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "empty"), "")

	status, h, body := filesCall(t, a, "GET", url.Values{"path": {f}}, "", nil)
	if status != 200 || !bytes.Equal(body, data) || h.Get("Content-Length") != strconv.Itoa(len(data)) ||
		h.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("download: %d, %d bytes, headers %v", status, len(body), h)
	}
	status, h, body = filesCall(t, a, "GET", url.Values{"path": {filepath.Join(dir, "empty")}}, "", nil)
	if status != 200 || len(body) != 0 || h.Get("Content-Length") != "0" {
		t.Fatalf("empty file: %d %q %v", status, body, h)
	}
	status, _, body = filesCall(t, a, "GET", url.Values{"path": {f}}, "", nil, "Range", "bytes=10-19")
	if status != http.StatusPartialContent || !bytes.Equal(body, data[10:20]) {
		t.Fatalf("range: %d, %d bytes", status, len(body))
	}
	// A virtual file has no size to promise: it is read to its end.
	status, _, body = filesCall(t, a, "GET", url.Values{"path": {"/proc/self/status"}}, "", nil)
	if status != 200 || !bytes.Contains(body, []byte("Pid:")) {
		t.Fatalf("/proc file: %d %q", status, body)
	}
	// Relative to the user's home.
	status, _, _ = filesCall(t, a, "GET", url.Values{"path": {"../etc/passwd"}, "username": {"root"}}, "", nil)
	if status != 200 {
		t.Fatalf("relative path: %d", status)
	}

	status, _, body = filesCall(t, a, "GET", url.Values{"path": {filepath.Join(dir, "missing")}}, "", nil)
	wantFilesError(t, "missing", status, body, 404, "no such file")
	status, _, body = filesCall(t, a, "GET", url.Values{"path": {dir}}, "", nil)
	wantFilesError(t, "directory", status, body, 400, "is a directory")
	status, _, body = filesCall(t, a, "GET", url.Values{}, "", nil)
	wantFilesError(t, "no path", status, body, 400, "path")
	// With the agent's rights, as envd (root) reads it.
	status, _, body = filesCall(t, a, "GET", url.Values{"path": {closedFile(t)}, "username": {"nobody"}}, "", nil)
	if status != 200 || string(body) != "secret" {
		t.Fatalf("a root-only file for nobody: %d %s", status, body)
	}
	status, _, body = filesCall(t, a, "GET", url.Values{"path": {f}, "username": {"no-such-user-here"}}, "", nil)
	wantFilesError(t, "unknown user", status, body, 400, "no such user")
	status, _, body = filesCall(t, a, "GET", url.Values{"path": {"/dev/null"}}, "", nil)
	wantFilesError(t, "device", status, body, 400, "not a regular file")
}

// POST /files with a raw body writes it to ?path=, making parents and
// replacing what was there, as the user.
func TestFilesUploadRaw(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	dir := openTree(t)
	target := filepath.Join(dir, "a/b/c.txt")
	status, _, body := filesCall(t, a, "POST", url.Values{"path": {target}, "username": {"nobody"}}, "application/octet-stream", strings.NewReader("first"))
	wantWritten(t, status, body, target)
	wantContent(t, target, "first")
	if uidOf(t, target) != 65534 || uidOf(t, filepath.Join(dir, "a")) != 65534 {
		t.Fatal("not written as the user")
	}
	status, _, body = filesCall(t, a, "POST", url.Values{"path": {target}, "username": {"nobody"}}, "application/octet-stream", strings.NewReader("second"))
	wantWritten(t, status, body, target)
	wantContent(t, target, "second")

	// The SDK's gzip option compresses the body.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("unzipped"))
	zw.Close()
	zipped := gz.Bytes()
	status, _, body = filesCall(t, a, "POST", url.Values{"path": {target}}, "application/octet-stream", bytes.NewReader(zipped), "Content-Encoding", "gzip")
	wantWritten(t, status, body, target)
	wantContent(t, target, "unzipped")

	status, _, body = filesCall(t, a, "POST", url.Values{"path": {target}}, "application/octet-stream", strings.NewReader("not gzip"), "Content-Encoding", "gzip")
	wantFilesError(t, "bad gzip", status, body, 400, "gzip")
	status, _, body = filesCall(t, a, "POST", url.Values{"path": {target}}, "application/octet-stream", strings.NewReader("x"), "Content-Encoding", "br")
	wantFilesError(t, "brotli", status, body, 400, "Content-Encoding")
	// A gzip stream cut short is the client's fault, and writes nothing.
	status, _, body = filesCall(t, a, "POST", url.Values{"path": {target}}, "application/octet-stream", bytes.NewReader(zipped[:len(zipped)-6]), "Content-Encoding", "gzip")
	wantFilesError(t, "truncated gzip", status, body, 400, "reading the body")
	wantContent(t, target, "unzipped")

	status, _, body = filesCall(t, a, "POST", url.Values{}, "application/octet-stream", strings.NewReader("x"))
	wantFilesError(t, "no path", status, body, 400, "path")
	status, _, body = filesCall(t, a, "POST", url.Values{"path": {target}}, "text/plain", strings.NewReader("x"))
	wantFilesError(t, "text/plain", status, body, 400, "Content-Type")
	status, _, body = filesCall(t, a, "POST", url.Values{"path": {dir}}, "application/octet-stream", strings.NewReader("x"))
	wantFilesError(t, "onto a directory", status, body, 400, "is a directory")
	status, _, body = filesCall(t, a, "POST", url.Values{"path": {filepath.Join(target, "below")}}, "application/octet-stream", strings.NewReader("x"))
	wantFilesError(t, "below a file", status, body, 400, "not a directory")
	// For nobody, as envd does: a root-only directory is written into,
	// the new directory and file are nobody's, a replaced file keeps its
	// owner.
	secret := closedFile(t)
	status, _, body = filesCall(t, a, "POST", url.Values{"path": {secret}, "username": {"nobody"}}, "application/octet-stream", strings.NewReader("x"))
	if status != 200 || uidOf(t, secret) != 0 {
		t.Fatalf("replacing a root-only file for nobody: %d %s, owner %d", status, body, uidOf(t, secret))
	}
	wantContent(t, secret, "x")
	fresh := filepath.Join(filepath.Dir(secret), "new/file")
	status, _, body = filesCall(t, a, "POST", url.Values{"path": {fresh}, "username": {"nobody"}}, "application/octet-stream", strings.NewReader("y"))
	if status != 200 || uidOf(t, fresh) != 65534 || uidOf(t, filepath.Dir(fresh)) != 65534 || uidOf(t, filepath.Dir(secret)) != 0 {
		t.Fatalf("a new file in a root-only directory for nobody: %d %s", status, body)
	}
	status, _, body = filesCall(t, a, "POST", url.Values{"path": {"/proc/self/comm"}}, "application/octet-stream", strings.NewReader("x"))
	wantFilesError(t, "virtual file", status, body, 400, "virtual")
}

// POST /files with a multipart body writes each part named file to the
// path its filename names (or to ?path=), all or none.
func TestFilesUploadMultipart(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	dir := t.TempDir()
	one, two := filepath.Join(dir, "one.txt"), filepath.Join(dir, "sub/two.txt")
	ctype, body := multipartBody(t, [3]string{"file", one, "1"}, [3]string{"other", "ignored", "?"}, [3]string{"file", two, "22"})
	status, _, raw := filesCall(t, a, "POST", url.Values{}, ctype, body)
	wantWritten(t, status, raw, one, two)
	wantContent(t, one, "1")
	wantContent(t, two, "22")
	if _, err := os.Stat(filepath.Join(dir, "ignored")); !os.IsNotExist(err) {
		t.Fatalf("a field that is not a file was written: %v", err)
	}

	// ?path= wins over the filename; relative paths are against the home.
	ctype, body = multipartBody(t, [3]string{"file", "whatever", "by path"})
	status, _, raw = filesCall(t, a, "POST", url.Values{"path": {one}}, ctype, body)
	wantWritten(t, status, raw, one)
	wantContent(t, one, "by path")
	rel := "rayito-envd-test-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { os.Remove("/root/" + rel) })
	ctype, body = multipartBody(t, [3]string{"file", rel, "home"})
	status, _, raw = filesCall(t, a, "POST", url.Values{"username": {"root"}}, ctype, body)
	wantWritten(t, status, raw, "/root/"+rel)

	// A failure anywhere writes none of the files.
	three := filepath.Join(dir, "three.txt")
	for _, c := range []struct {
		what   string
		q      url.Values
		parts  [][3]string
		status int
		msg    string
	}{
		{"same target twice", url.Values{}, [][3]string{{"file", three, "a"}, {"file", three, "b"}}, 400, "two files"},
		{"path for two parts", url.Values{"path": {three}}, [][3]string{{"file", "x", "a"}, {"file", "y", "b"}}, 400, "two files"},
		{"no filename", url.Values{}, [][3]string{{"file", three, "a"}, {"file", "", "b"}}, 400, "no filename"},
		{"a directory", url.Values{}, [][3]string{{"file", three, "a"}, {"file", dir, "b"}}, 400, "is a directory"},
	} {
		ctype, body := multipartBody(t, c.parts...)
		status, _, raw := filesCall(t, a, "POST", c.q, ctype, body)
		wantFilesError(t, c.what, status, raw, c.status, c.msg)
		if _, err := os.Stat(three); !os.IsNotExist(err) {
			t.Fatalf("%s: a file was written: %v", c.what, err)
		}
	}
	status, _, raw = filesCall(t, a, "POST", url.Values{}, "multipart/form-data; boundary=xyz", strings.NewReader("--xyz\r\nbroken"))
	wantFilesError(t, "broken multipart", status, raw, 400, "multipart")
	status, _, raw = filesCall(t, a, "POST", url.Values{}, "multipart/form-data", strings.NewReader(""))
	wantFilesError(t, "no boundary", status, raw, 400, "Content-Type")
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Fatalf("temporary file left: %s", e.Name())
		}
	}
}

// A disk that fills up answers 507, which the SDK turns into
// NotEnoughSpaceError, and leaves the old file.
func TestFilesUploadDiskFull(t *testing.T) {
	t.Parallel()
	dir := smallTmpfs(t)
	a := newAgent(t, agentOptions{})
	target := filepath.Join(dir, "f")
	mustWrite(t, target, "old")
	status, _, raw := filesCall(t, a, "POST", url.Values{"path": {target}}, "application/octet-stream", bytes.NewReader(make([]byte, 2<<20)))
	wantFilesError(t, "disk full", status, raw, http.StatusInsufficientStorage, "no space")
	wantContent(t, target, "old")
}

// Bytes through /files count as traffic, both ways.
func TestFilesTraffic(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	f := filepath.Join(t.TempDir(), "f")
	before := a.counter.Snapshot()
	status, _, raw := filesCall(t, a, "POST", url.Values{"path": {f}}, "application/octet-stream", bytes.NewReader(make([]byte, 100000)))
	wantWritten(t, status, raw, f)
	mid := a.counter.Snapshot()
	if mid.BytesIn-before.BytesIn < 100000 {
		t.Fatalf("upload: traffic %+v then %+v", before, mid)
	}
	if status, _, body := filesCall(t, a, "GET", url.Values{"path": {f}}, "", nil); status != 200 || len(body) != 100000 {
		t.Fatalf("download: %d, %d bytes", status, len(body))
	}
	if after := a.counter.Snapshot(); after.BytesOut-mid.BytesOut < 100000 {
		t.Fatalf("download: traffic %+v then %+v", mid, after)
	}
}

// X-Metadata-* headers give the uploaded files metadata, which the answer,
// Stat and ListDir show; a write without them clears it.
func TestFilesUploadMetadata(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	status, _, raw := filesCall(t, a, "POST", url.Values{"path": {f}}, "application/octet-stream", strings.NewReader("x"),
		"X-Metadata-Author", "mish", "x-metadata-PURPOSE", "up load", "X-Metadata-", "no key")
	var got []struct {
		Path     string            `json:"path"`
		Metadata map[string]string `json:"metadata"`
	}
	want := map[string]string{"author": "mish", "purpose": "up load"}
	if status != 200 || json.Unmarshal(raw, &got) != nil || len(got) != 1 || !maps.Equal(got[0].Metadata, want) {
		t.Fatalf("upload: %d %s", status, raw)
	}
	stat, err := a.fs.Stat(ctxLong(t), authed(connect.NewRequest(&filesystem.StatRequest{Path: f})))
	if err != nil || !maps.Equal(stat.Msg.GetEntry().GetMetadata(), want) {
		t.Fatalf("stat: %v, %v", stat, err)
	}
	list, err := a.fs.ListDir(ctxLong(t), authed(connect.NewRequest(&filesystem.ListDirRequest{Path: dir})))
	if err != nil || len(list.Msg.GetEntries()) != 1 || !maps.Equal(list.Msg.GetEntries()[0].GetMetadata(), want) {
		t.Fatalf("list: %v, %v", list, err)
	}
	status, _, raw = filesCall(t, a, "POST", url.Values{"path": {f}}, "application/octet-stream", strings.NewReader("y"))
	if status != 200 || strings.Contains(string(raw), "metadata") {
		t.Fatalf("upload without metadata: %d %s", status, raw)
	}
	if stat, _ = a.fs.Stat(ctxLong(t), authed(connect.NewRequest(&filesystem.StatRequest{Path: f}))); stat.Msg.GetEntry().GetMetadata() != nil {
		t.Fatalf("metadata kept after a rewrite: %v", stat.Msg.GetEntry())
	}
	status, _, raw = filesCall(t, a, "POST", url.Values{"path": {f}}, "application/octet-stream", strings.NewReader("z"),
		"X-Metadata-"+strings.Repeat("k", 300), "v")
	wantFilesError(t, "long key", status, raw, 400, "metadata key")
	wantContent(t, f, "y")
}

// A client that goes away in the middle of its upload body leaves every
// target as it was and no temporary file behind.
func TestFilesUploadBrokenBody(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	addr := strings.TrimPrefix(a.url, "http://")
	big := bytes.Repeat([]byte("new content "), 200000)
	cases := []struct {
		name   string
		upload func(dir string) (head string, body []byte)
	}{
		{"octet-stream", func(dir string) (string, []byte) {
			return "POST /files?path=" + url.QueryEscape(filepath.Join(dir, "a.txt")) + " HTTP/1.1\nHost: agent\n" +
				"X-Access-Token: " + nativeToken + "\nContent-Type: application/octet-stream\n", big
		}},
		{"multipart", func(dir string) (string, []byte) {
			ctype, body := multipartBody(t, [3]string{"file", filepath.Join(dir, "a.txt"), "small"},
				[3]string{"file", filepath.Join(dir, "b.txt"), string(big)})
			return "POST /files HTTP/1.1\nHost: agent\nX-Access-Token: " + nativeToken + "\nContent-Type: " + ctype + "\n", body.Bytes()
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { filestest.BrokenUpload(t, addr, c.upload) })
	}
}

// A multipart upload commits all its files or none: a target that becomes
// a directory between the staging and the commit leaves the others
// unwritten too.
func TestFilesUploadAllOrNone(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "a.txt"), "old a.txt")
	req, _ := http.NewRequest("POST", a.url+"/files", nil)
	req.Header.Set("X-Access-Token", nativeToken)
	names := []string{filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt"), filepath.Join(dir, "c.txt")}
	status, raw := filestest.RaceUpload(t, req, dir, names, func() {
		os.Mkdir(filepath.Join(dir, "b.txt"), 0o755)
	})
	wantContent(t, filepath.Join(dir, "a.txt"), "old a.txt")
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Fatalf("a failed upload left %v", entries)
	}
	wantFilesError(t, "a directory made meanwhile", status, raw, 400, "is a directory")
}

// More than files.MaxBatch files in one upload is refused with 429, the
// status every surface gives limit (the SDK's RateLimitError, as for
// envd's resource_exhausted), and writes none of them.
func TestFilesUploadTooManyParts(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	dir := t.TempDir()
	parts := make([][3]string, files.MaxBatch+1)
	for i := range parts {
		parts[i] = [3]string{"file", filepath.Join(dir, "f"+strconv.Itoa(i)), "x"}
	}
	ctype, body := multipartBody(t, parts...)
	status, _, raw := filesCall(t, a, "POST", url.Values{}, ctype, body)
	wantFilesError(t, "too many parts", status, raw, http.StatusTooManyRequests, "more than 1000 files")
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a refused upload left %d entries", len(entries))
	}
}

// smallTmpfs mounts a 1 MiB tmpfs for the test (root only: skipped
// otherwise), by system call: a mount command's exit could be reaped by
// the package's reaper before its Wait.
func smallTmpfs(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, 0) })
	return dir
}
