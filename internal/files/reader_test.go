package files

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/wire"
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
		f, err := m.Open("", "", path)
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

// TestHeldFilesCounted: the files downloads hold open are counted; one
// past the budget waits for a close, then is refused with ErrBusy
// (limit), and a close gives its descriptor back.
func TestHeldFilesCounted(t *testing.T) {
	m, _ := newManager(t)
	m.held = &heldSlots{max: 2, share: 2, by: map[string]int{}, freed: make(chan struct{})} // one client may take all
	old := heldWait
	heldWait = 50 * time.Millisecond
	defer func() { heldWait = old }()
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("x"), 0o644)
	a, err := m.Open("", "", p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Open("", "", p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Open("", "", p); !errors.Is(err, ErrBusy) || Code(err) != wire.CodeLimit || strings.Contains(err.Error(), "other users") {
		t.Fatalf("a third open on a budget of two: %v", err)
	}
	var buf bytes.Buffer
	if err := m.WriteTar("", "", dir, &buf); !errors.Is(err, ErrBusy) {
		t.Fatalf("a tar of a file on a spent budget: %v", err)
	}
	a.Close()
	a.Close() // twice: gives back one
	c, err := m.Open("", "", p)
	if err != nil {
		t.Fatalf("after a close: %v", err)
	}
	if _, err := m.Open("", "", p); !errors.Is(err, ErrBusy) {
		t.Fatalf("a second Close gave back another descriptor: %v", err)
	}
	b.Close()
	c.Close()
	if err := m.WriteTar("", "", dir, &buf); err != nil {
		t.Fatalf("a tar once files are closed: %v", err)
	}
}
