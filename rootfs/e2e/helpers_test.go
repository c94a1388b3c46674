package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The checker behind "every line exactly once" must catch each way a
// stream can go wrong.
func TestSequenceFindsProblems(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input string
		want  string // substring of the first problem; "" for none
	}{
		{"complete", "tick 0 7\ntick 1 7\r\ntick 2 7\ndone 3 7\n", ""},
		{"duplicate", "tick 0 7\ntick 1 7\ntick 1 7\ntick 2 7\ndone 3 7\n", "duplicate"},
		{"missing", "tick 0 7\ntick 2 7\ndone 3 7\n", "missing"},
		{"restarted", "tick 0 7\ntick 1 8\ndone 2 8\n", "restarted"},
		{"short", "tick 0 7\ntick 1 7\ndone 3 7\n", "producer made 3"},
		{"no end", "tick 0 7\n", "no done line"},
		{"garbage", "tick 0 7\nhello\ndone 1 7\n", "unexpected line"},
		{"unterminated", "tick 0 7\ndone 1 7\ntick", "unterminated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSequence("tick", 7)
			// Arbitrary chunking, as terminal and cell output arrive.
			for i := 0; i < len(tc.input); i += 5 {
				s.feed(tc.input[i:min(i+5, len(tc.input))])
			}
			_, problems := s.result()
			switch {
			case tc.want == "" && len(problems) > 0:
				t.Errorf("problems %q, want none", problems)
			case tc.want != "" && (len(problems) == 0 || !strings.Contains(problems[0], tc.want)):
				t.Errorf("problems %q, want one about %q", problems, tc.want)
			}
		})
	}
}

// hostRoute holds dials while the VM is down and leads them to the
// address set last.
func TestHostRoute(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	r := newHostRoute()
	defer r.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := r.dial(ctx, "tcp", "ignored:1")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial while down: %v, want the context's deadline", err)
	}

	got := make(chan error, 1)
	go func() {
		resp, err := r.HTTPClient().Get(routeURL + "/health")
		if err == nil {
			resp.Body.Close()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("request went through while the route was down: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	r.Set(strings.TrimPrefix(srv.URL, "http://"))
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	r.Down()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	r.Set(addr) // nothing listens there now
	if _, err := r.HTTPClient().Get(routeURL + "/health"); err == nil {
		t.Error("request reached the old address after Down and Set")
	}
}
