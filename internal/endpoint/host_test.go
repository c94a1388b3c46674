package endpoint

import (
	"context"
	"errors"
	"github.com/rayito/rayito-agent/internal/surface/surfacetest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func (a *testAgent) post(t *testing.T, path, token, body string) (int, map[string]any) {
	t.Helper()
	return surfacetest.PostObject(t, a.http.URL+path, token, body)
}

// TestResumeCutsOldConnectionsAndReattachLosesNothing runs a counter
// across a resume: the old connection gets `end` reason resume with its
// cursors and a 4000 close; attaching again from those cursors on a new
// connection continues the output with no byte lost or repeated.
func TestResumeCutsOldConnectionsAndReattachLosesNothing(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	id := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"sh", "-c", "for i in $(seq 1 300); do echo line $i; sleep 0.005; done"}}))
	var got []byte
	// Read some output, then resume.
	for len(got) < 100 {
		_, d := rc.read()
		if d != nil {
			got = append(got, d.Payload...)
		}
	}
	resumed := make(chan map[string]any, 1)
	go func() {
		_, m := a.post(t, "/v1/resume", testToken, `{"resume_id":"r1"}`)
		resumed <- m
	}()
	var end map[string]any
	for end == nil {
		m, d := rc.read()
		if d != nil {
			if uint64(len(got)) != d.Offset {
				t.Fatalf("offset %d after %d bytes", d.Offset, len(got))
			}
			got = append(got, d.Payload...)
		} else if m["event"] == "end" {
			end = m
		}
	}
	if end["reason"] != "resume" {
		t.Fatalf("end %v", end)
	}
	cursors := end["cursors"].(map[string]any)
	if uint64(cursors["stdout"].(float64)) != uint64(len(got)) {
		t.Fatalf("end cursors %v, received %d bytes", cursors, len(got))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err := rc.c.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 4000 || ce.Reason != "resumed" {
		t.Fatalf("after end: %v, want close 4000 resumed", err)
	}
	h := <-resumed
	if h["resume_generation"].(float64) != 1 {
		t.Fatalf("resume answered %v", h)
	}

	rc2 := a.dial(t)
	r := rc2.call(map[string]any{"op": "attach", "stream": id, "from": map[string]uint64{"stdout": uint64(len(got))}})
	if r["error"] != nil {
		t.Fatalf("reattach: %v", r)
	}
	rest, fin := rc2.collectFrom(id, uint64(len(got)))
	got = append(got, rest["stdout"]...)
	if fin["reason"] != "exit" {
		t.Fatalf("final end %v", fin)
	}
	var want strings.Builder
	for i := 1; i <= 300; i++ {
		want.WriteString("line " + strconv.Itoa(i) + "\n")
	}
	if string(got) != want.String() {
		t.Fatalf("output across resume differs: got %d bytes, want %d", len(got), want.Len())
	}
}
