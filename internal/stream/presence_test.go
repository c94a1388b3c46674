package stream_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

func TestUnattached(t *testing.T) {
	s := newStream(t, 5*time.Second, byteChan("stdout", stream.Block, 0))
	created := time.Now()
	alone, since := s.Unattached()
	if !alone || since.After(created) {
		t.Fatalf("new stream: alone %v since %v", alone, since)
	}
	a, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if alone, _ := s.Unattached(); alone {
		t.Fatal("attached stream reported alone")
	}
	a.Close()
	alone, since = s.Unattached()
	if !alone || since.Before(created) {
		t.Fatalf("after detach: alone %v since %v", alone, since)
	}
	if s.Grace() != 5*time.Second {
		t.Fatalf("grace %v", s.Grace())
	}
	if g := newStream(t, -1, byteChan("stdout", stream.Block, 0)).Grace(); g != 0 {
		t.Fatalf("no grace reported as %v", g)
	}
}

// TestEndExtra: a producer's own end fields are encoded, and never
// replace the protocol's.
func TestEndExtra(t *testing.T) {
	e := stream.End{Reason: stream.ReasonDone, Status: "ok", Extra: map[string]any{"size": 3, "status": "forged", "reason": "x"}}
	var m map[string]any
	b, _ := json.Marshal(e)
	json.Unmarshal(b, &m)
	if m["reason"] != "done" || m["status"] != "ok" || m["size"] != float64(3) {
		t.Fatalf("encoded %s", b)
	}
}
