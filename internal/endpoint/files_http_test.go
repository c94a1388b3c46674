package endpoint

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rayito/rayito-agent/internal/files"
	"github.com/rayito/rayito-agent/internal/files/filestest"
)

// fileRequest makes an authorized request to /v1/files.
func (a *testAgent) fileRequest(t *testing.T, method string, q url.Values, body io.Reader, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, a.http.URL+"/v1/files?"+q.Encode(), body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func httpErrorCode(b []byte) string {
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	json.Unmarshal(b, &e)
	return e.Error.Code
}

func TestFilesHTTPDownload(t *testing.T) {
	a := newTestAgent(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "page.html")
	content := strings.Repeat("<p>hi</p>", 10000)
	os.WriteFile(p, []byte(content), 0o644)
	before := a.traffic.Snapshot().BytesOut
	resp, b := a.fileRequest(t, "GET", url.Values{"path": {p}}, nil)
	if resp.StatusCode != 200 || string(b) != content || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" ||
		resp.ContentLength != int64(len(content)) || resp.Header.Get("Last-Modified") == "" {
		t.Fatalf("GET: %d %v, %d bytes", resp.StatusCode, resp.Header, len(b))
	}
	if got := a.traffic.Snapshot().BytesOut - before; got < uint64(len(content)) {
		t.Fatalf("download counted as %d bytes of traffic", got)
	}
	resp, b = a.fileRequest(t, "GET", url.Values{"path": {p}}, nil, "Range", "bytes=3-8")
	if resp.StatusCode != 206 || string(b) != content[3:9] {
		t.Fatalf("Range: %d %q", resp.StatusCode, b)
	}
	resp, b = a.fileRequest(t, "HEAD", url.Values{"path": {p}}, nil)
	if resp.StatusCode != 200 || len(b) != 0 || resp.ContentLength != int64(len(content)) {
		t.Fatalf("HEAD: %d %v", resp.StatusCode, resp.Header)
	}
	os.WriteFile(filepath.Join(dir, "blob"), []byte{0, 1, 2}, 0o644)
	if resp, _ := a.fileRequest(t, "GET", url.Values{"path": {filepath.Join(dir, "blob")}}, nil); resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("no extension: %v", resp.Header.Get("Content-Type"))
	}
	resp, b = a.fileRequest(t, "GET", url.Values{"path": {"/proc/self/status"}}, nil)
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte("Umask:")) {
		t.Fatalf("a virtual file: %d %q", resp.StatusCode, b)
	}
}

func TestFilesHTTPTar(t *testing.T) {
	a := newTestAgent(t)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "proj/src"), 0o755)
	os.WriteFile(filepath.Join(dir, "proj/src/main.go"), []byte("package main"), 0o644)
	resp, b := a.fileRequest(t, "GET", url.Values{"path": {filepath.Join(dir, "proj")}}, nil)
	if resp.StatusCode != 400 || !strings.Contains(string(b), "format=tar") {
		t.Fatalf("a directory without format: %d %s", resp.StatusCode, b)
	}
	resp, b = a.fileRequest(t, "GET", url.Values{"path": {filepath.Join(dir, "proj")}, "format": {"tar"}}, nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-tar" {
		t.Fatalf("tar: %d %v", resp.StatusCode, resp.Header)
	}
	tr := tar.NewReader(bytes.NewReader(b))
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if strings.Join(names, " ") != "src/ src/main.go" {
		t.Fatalf("entries %v", names)
	}
	resp, b = a.fileRequest(t, "GET", url.Values{"path": {filepath.Join(dir, "proj/src/main.go")}, "format": {"tar"}}, nil)
	if resp.StatusCode != 400 {
		t.Fatalf("tar of a file: %d %s", resp.StatusCode, b)
	}
	resp, _ = a.fileRequest(t, "GET", url.Values{"path": {dir}, "format": {"zip"}}, nil)
	if resp.StatusCode != 400 {
		t.Fatalf("unknown format: %d", resp.StatusCode)
	}
}

func TestFilesHTTPUpload(t *testing.T) {
	a := newTestAgent(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "new/dir/f.txt")
	before := a.traffic.Snapshot().BytesIn
	resp, b := a.fileRequest(t, "PUT", url.Values{"path": {p}, "mode": {"600"}}, strings.NewReader("first"))
	sum := sha256.Sum256([]byte("first"))
	var w struct {
		Path, SHA256 string
		Size         int64
	}
	json.Unmarshal(b, &w)
	if resp.StatusCode != 201 || w.Path != p || w.Size != 5 || w.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("PUT: %d %s", resp.StatusCode, b)
	}
	if a.traffic.Snapshot().BytesIn-before < 5 {
		t.Fatal("upload not counted as traffic")
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	resp, _ = a.fileRequest(t, "PUT", url.Values{"path": {p}, "append": {"true"}}, strings.NewReader("+second"))
	if got, _ := os.ReadFile(p); resp.StatusCode != 200 || string(got) != "first+second" {
		t.Fatalf("append: %d %q", resp.StatusCode, got)
	}
	resp, b = a.fileRequest(t, "PUT", url.Values{"path": {p}, "exclusive": {"true"}}, strings.NewReader("x"))
	if resp.StatusCode != 409 || httpErrorCode(b) != "conflict" {
		t.Fatalf("exclusive: %d %s", resp.StatusCode, b)
	}
	resp, b = a.fileRequest(t, "PUT", url.Values{"path": {filepath.Join(dir, "a/b")}, "parents": {"false"}}, strings.NewReader("x"))
	if resp.StatusCode != 404 || httpErrorCode(b) != "not_found" {
		t.Fatalf("no parents: %d %s", resp.StatusCode, b)
	}
}

func TestFilesHTTPMultipart(t *testing.T) {
	a := newTestAgent(t)
	dir := t.TempDir()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for name, content := range map[string]string{"a.txt": "A", "sub/dir/b.txt": "B"} {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="file"; filename="`+name+`"`)
		part, _ := mw.CreatePart(h)
		io.WriteString(part, content)
	}
	mw.Close()
	resp, b := a.fileRequest(t, "POST", url.Values{"path": {dir}}, &body, "Content-Type", mw.FormDataContentType())
	var out struct{ Files []struct{ Path string } }
	json.Unmarshal(b, &out)
	if resp.StatusCode != 201 || len(out.Files) != 2 {
		t.Fatalf("POST: %d %s", resp.StatusCode, b)
	}
	for name, content := range map[string]string{"a.txt": "A", "sub/dir/b.txt": "B"} {
		if got, _ := os.ReadFile(filepath.Join(dir, name)); string(got) != content {
			t.Fatalf("%s: %q", name, got)
		}
	}

	// One bad part (a directory in the way) changes none of the files.
	body.Reset()
	mw = multipart.NewWriter(&body)
	for _, name := range []string{"a.txt", "sub"} {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="file"; filename="`+name+`"`)
		part, _ := mw.CreatePart(h)
		io.WriteString(part, "changed")
	}
	mw.Close()
	resp, b = a.fileRequest(t, "POST", url.Values{"path": {dir}}, &body, "Content-Type", mw.FormDataContentType())
	if resp.StatusCode != 400 {
		t.Fatalf("POST with a directory in the way: %d %s", resp.StatusCode, b)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(got) != "A" {
		t.Fatalf("a.txt changed by a failed upload: %q", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("left in the directory: %v", entries)
	}

	body.Reset()
	mw = multipart.NewWriter(&body)
	mw.WriteField("note", "no filename")
	mw.Close()
	resp, b = a.fileRequest(t, "POST", url.Values{"path": {dir}}, &body, "Content-Type", mw.FormDataContentType())
	if resp.StatusCode != 400 || !strings.Contains(string(b), "filename") {
		t.Fatalf("a part without filename: %d %s", resp.StatusCode, b)
	}
	resp, _ = a.fileRequest(t, "POST", url.Values{"path": {dir}}, strings.NewReader("raw"), "Content-Type", "text/plain")
	if resp.StatusCode != 400 {
		t.Fatalf("not multipart: %d", resp.StatusCode)
	}
}

func TestFilesHTTPErrors(t *testing.T) {
	a := newTestAgent(t)
	dir := t.TempDir()
	openTree(t, dir)
	private := filepath.Join(dir, "private")
	os.Mkdir(private, 0o700)
	os.WriteFile(filepath.Join(private, "s"), []byte("s"), 0o600)
	cases := []struct {
		name, method string
		q            url.Values
		status       int
		code         string
	}{
		{"missing", "GET", url.Values{"path": {filepath.Join(dir, "nope")}}, 404, "not_found"},
		{"no path", "GET", url.Values{}, 400, "bad_request"},
		{"NUL", "GET", url.Values{"path": {"/tmp/a\x00b"}}, 400, "bad_request"},
		{"unknown param", "GET", url.Values{"path": {dir}, "recursive": {"1"}}, 400, "bad_request"},
		{"as nobody", "GET", url.Values{"path": {filepath.Join(private, "s")}, "user": {"nobody"}}, 403, "permission_denied"},
		{"unknown user", "GET", url.Values{"path": {dir}, "user": {"no-such-user-xyz"}}, 400, "bad_request"},
		{"a device", "GET", url.Values{"path": {"/dev/zero"}}, 400, "bad_request"},
		{"write as nobody", "PUT", url.Values{"path": {filepath.Join(private, "x")}, "user": {"nobody"}}, 403, "permission_denied"},
		{"write into /proc", "PUT", url.Values{"path": {"/proc/sys/kernel/hostname"}}, 400, "bad_request"},
		{"write a directory", "PUT", url.Values{"path": {dir}}, 400, "bad_request"},
		{"bad mode", "PUT", url.Values{"path": {filepath.Join(dir, "m")}, "mode": {"rw"}}, 400, "bad_request"},
		{"bad bool", "PUT", url.Values{"path": {filepath.Join(dir, "m")}, "append": {"maybe"}}, 400, "bad_request"},
	}
	for _, c := range cases {
		resp, b := a.fileRequest(t, c.method, c.q, strings.NewReader("body"))
		if resp.StatusCode != c.status || httpErrorCode(b) != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, resp.StatusCode, b, c.status, c.code)
		}
	}
	req, _ := http.NewRequest("GET", a.http.URL+"/v1/files?path=/etc/hostname", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("without a token: %v %v", resp, err)
	}
	req, _ = http.NewRequest("DELETE", a.http.URL+"/v1/files?path=/x&access_token="+testToken, nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD, PUT, POST" {
		t.Fatalf("DELETE: %v %v", resp, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("refused uploads left %v", entries)
	}
}

// A client that goes away in the middle of its upload body leaves every
// target as it was and no temporary file behind.
func TestFilesHTTPBrokenBody(t *testing.T) {
	a := newTestAgent(t)
	addr := strings.TrimPrefix(a.http.URL, "http://")
	big := bytes.Repeat([]byte("new content "), 200000)
	cases := []struct {
		name   string
		upload func(dir string) (head string, body []byte)
	}{
		{"PUT", func(dir string) (string, []byte) {
			return "PUT /v1/files?path=" + url.QueryEscape(filepath.Join(dir, "a.txt")) + " HTTP/1.1\nHost: agent\n" +
				"Authorization: Bearer " + testToken + "\n", big
		}},
		{"POST", func(dir string) (string, []byte) {
			var body bytes.Buffer
			mw := multipart.NewWriter(&body)
			for _, p := range []struct {
				name    string
				content []byte
			}{{"a.txt", []byte("small")}, {"b.txt", big}} {
				w, _ := mw.CreateFormFile("file", p.name)
				w.Write(p.content)
			}
			mw.Close()
			return "POST /v1/files?path=" + url.QueryEscape(dir) + " HTTP/1.1\nHost: agent\n" +
				"Authorization: Bearer " + testToken + "\nContent-Type: " + mw.FormDataContentType() + "\n", body.Bytes()
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { filestest.BrokenUpload(t, addr, c.upload) })
	}
}

// A multipart upload commits all its files or none: a target that breaks
// its part's options between the staging and the commit (exclusive, and
// another process made the file) leaves the others unwritten too.
func TestFilesHTTPMultipartAllOrNone(t *testing.T) {
	a := newTestAgent(t)
	dir := t.TempDir()
	req, _ := http.NewRequest("POST", a.http.URL+"/v1/files?"+url.Values{"path": {dir}, "exclusive": {"true"}}.Encode(), nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	status, b := filestest.RaceUpload(t, req, dir, []string{"a.txt", "b.txt", "c.txt"}, func() {
		os.WriteFile(filepath.Join(dir, "b.txt"), []byte("theirs"), 0o644)
	})
	if status != 409 || httpErrorCode(b) != "conflict" || !strings.Contains(string(b), "b.txt") {
		t.Fatalf("exclusive upload onto a file made meanwhile: %d %s", status, b)
	}
	entries, _ := os.ReadDir(dir)
	if got, _ := os.ReadFile(filepath.Join(dir, "b.txt")); len(entries) != 1 || string(got) != "theirs" {
		t.Fatalf("a failed upload left %v, b.txt %q", entries, got)
	}

	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, content := range []string{"one", "two"} {
		part, _ := mw.CreateFormFile("file", "twice.txt")
		io.WriteString(part, content)
	}
	mw.Close()
	resp, b := a.fileRequest(t, "POST", url.Values{"path": {dir}}, &body, "Content-Type", mw.FormDataContentType())
	if resp.StatusCode != 400 || httpErrorCode(b) != "bad_request" || !strings.Contains(string(b), "two files") {
		t.Fatalf("two parts for one target: %d %s", resp.StatusCode, b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("a refused upload left %v", entries)
	}
}

// More than files.MaxBatch parts is limit, with the status the table
// gives limit, and writes none of them.
func TestFilesHTTPTooManyParts(t *testing.T) {
	a := newTestAgent(t)
	dir := t.TempDir()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for i := 0; i <= files.MaxBatch; i++ {
		part, _ := mw.CreateFormFile("file", fmt.Sprintf("f%d", i))
		io.WriteString(part, "x")
	}
	mw.Close()
	resp, b := a.fileRequest(t, "POST", url.Values{"path": {dir}}, &body, "Content-Type", mw.FormDataContentType())
	if resp.StatusCode != http.StatusTooManyRequests || httpErrorCode(b) != "limit" || !strings.Contains(string(b), "more than 1000 files") {
		t.Fatalf("%d parts: %d %s", files.MaxBatch+1, resp.StatusCode, b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a refused upload left %d entries", len(entries))
	}
}

// TestFilesHTTPPartNamesStayInside: a part of POST /v1/files?path=D may
// not name a file outside D: "../x" and "a/../../x" are refused with
// bad_request and nothing of the upload is written; "/abs/x" and
// "a/../b" stay inside D.
func TestFilesHTTPPartNamesStayInside(t *testing.T) {
	a := newTestAgent(t)
	root := t.TempDir()
	dir := filepath.Join(root, "d")
	os.Mkdir(dir, 0o755)
	upload := func(names ...string) (*http.Response, []byte) {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		for _, n := range names {
			part, _ := mw.CreateFormFile("file", n)
			io.WriteString(part, "x")
		}
		mw.Close()
		return a.fileRequest(t, "POST", url.Values{"path": {dir}}, &body, "Content-Type", mw.FormDataContentType())
	}
	for _, bad := range []string{"../escape", "a/../../escape", "..", "ok/../../../escape"} {
		resp, b := upload("first", bad)
		if resp.StatusCode != http.StatusBadRequest || httpErrorCode(b) != "bad_request" {
			t.Errorf("part %q: %d %s, want 400 bad_request", bad, resp.StatusCode, b)
		}
		if entries, _ := os.ReadDir(root); len(entries) != 1 {
			t.Fatalf("part %q: the upload wrote %v beside the directory", bad, entries)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatalf("part %q: a refused upload wrote %v", bad, entries)
		}
	}
	if resp, b := upload("/abs/x", "a/../b"); resp.StatusCode != http.StatusCreated {
		t.Fatalf("names inside: %d %s", resp.StatusCode, b)
	}
	for _, p := range []string{"abs/x", "b"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("%s not written inside the directory: %v", p, err)
		}
	}
}
