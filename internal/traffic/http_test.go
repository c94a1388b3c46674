package traffic

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
