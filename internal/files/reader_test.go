package files

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

// Serve sends a file with its length and type, honours Range and HEAD,
// and reads a virtual file to its end.
func TestServe(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "page.html")
	writeFile(t, p, "<p>hello</p>")
	serve := func(path, method, rng string) *httptest.ResponseRecorder {
		f, err := m.Open("", path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		r := httptest.NewRequest(method, "/x", nil)
		if rng != "" {
			r.Header.Set("Range", rng)
		}
		w := httptest.NewRecorder()
		f.Serve(w, r)
		return w
	}
	w := serve(p, "GET", "")
	if w.Code != 200 || w.Body.String() != "<p>hello</p>" || w.Header().Get("Content-Length") != "12" ||
		!strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("GET: %d %q %v", w.Code, w.Body, w.Header())
	}
	if w = serve(p, "GET", "bytes=3-7"); w.Code != http.StatusPartialContent || w.Body.String() != "hello" {
		t.Fatalf("Range: %d %q", w.Code, w.Body)
	}
	if w = serve(p, "HEAD", ""); w.Code != 200 || w.Body.Len() != 0 || w.Header().Get("Content-Length") != "12" {
		t.Fatalf("HEAD: %d %q %v", w.Code, w.Body, w.Header())
	}
	writeFile(t, filepath.Join(dir, "noext"), "x")
	if w = serve(filepath.Join(dir, "noext"), "GET", ""); w.Header().Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("no extension: %v", w.Header())
	}
	if w = serve("/proc/self/status", "GET", ""); w.Code != 200 || !strings.Contains(w.Body.String(), "Pid:") || w.Header().Get("Content-Length") != "" {
		t.Fatalf("virtual file: %d %q %v", w.Code, w.Body, w.Header())
	}
}
