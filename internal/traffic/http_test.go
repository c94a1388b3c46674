package traffic

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// TestCountHTTP: request and response bodies count both ways, and a
// handler can still flush through the wrapper.
func TestCountHTTP(t *testing.T) {
	c := NewCounter()
	h := CountHTTP(c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
		w.Write([]byte("!"))
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush through the wrapper: %v", err)
		}
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello!" {
		t.Fatalf("body %q", body)
	}
	s := c.Snapshot()
	if s.BytesIn != 5 || s.BytesOut != 6 {
		t.Fatalf("counted in %d out %d, want 5 and 6", s.BytesIn, s.BytesOut)
	}
}

// TestCountHTTPServeContent: a file served by http.ServeContent (through
// ReadFrom, chunk by chunk) is counted in full, and a range as its bytes.
func TestCountHTTPServeContent(t *testing.T) {
	c := NewCounter()
	f, err := os.CreateTemp(t.TempDir(), "content")
	if err != nil {
		t.Fatal(err)
	}
	content := bytes.Repeat([]byte("0123456789"), 1<<20) // 10 MiB: several chunks
	f.Write(content)
	h := CountHTTP(c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "f", time.Time{}, f)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(body, content) || c.Snapshot().BytesOut != uint64(len(content)) {
		t.Fatalf("got %d bytes, counted %d", len(body), c.Snapshot().BytesOut)
	}
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("Range", "bytes=5-14")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "5678901234" || c.Snapshot().BytesOut != uint64(len(content))+10 {
		t.Fatalf("range: %q, counted %d", body, c.Snapshot().BytesOut)
	}
}
