package endpoint

import (
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

// waitEnded waits until the agent lists the stream as ended.
func (a *testAgent) waitEnded(t *testing.T, id uint64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if s := a.streams.Get(id); s == nil || s.Ended() != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %d did not end", id)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestExpiredStreamSaysSo: beyond --keep-ended the oldest ended stream
// expires; attaching it is not_found saying it expired, which an id that
// never existed does not say.
func TestExpiredStreamSaysSo(t *testing.T) {
	a := newTestAgent(t, stream.Limits{MaxEnded: 2})
	rc := a.dial(t)
	var ids []uint64
	for range 3 {
		id := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"echo", "unread"}, "attach": false}))
		a.waitEnded(t, id)
		ids = append(ids, id)
	}
	m := rc.call(map[string]any{"op": "attach", "stream": ids[0]})
	msg, _ := m["error"].(map[string]any)["message"].(string)
	if errorCode(m) != "not_found" || !strings.Contains(msg, "expired") || !strings.Contains(msg, "at most 2") {
		t.Fatalf("attach of an expired stream: %v", m)
	}
	m = rc.call(map[string]any{"op": "attach", "stream": 999})
	msg, _ = m["error"].(map[string]any)["message"].(string)
	if errorCode(m) != "not_found" || strings.Contains(msg, "expired") {
		t.Fatalf("attach of a stream that never was: %v", m)
	}
	// The two kept are whole.
	for _, id := range ids[1:] {
		if m := rc.call(map[string]any{"op": "attach", "stream": id}); errorCode(m) != "" {
			t.Fatalf("attach of kept stream %d: %v", id, m)
		}
		out, end := rc.collect(id)
		if string(out["stdout"]) != "unread\n" || end["reason"] != "exit" {
			t.Fatalf("stream %d: %q %v", id, out["stdout"], end)
		}
	}
}

// TestBufferBeyondBudget: a `buffer` the budget cannot set aside is
// refused with limit, naming the budget, and starts nothing; one it can
// is accepted.
func TestBufferBeyondBudget(t *testing.T) {
	a := newTestAgent(t, stream.Limits{Budget: 16 << 20})
	rc := a.dial(t)
	for _, op := range []string{"exec", "pty"} {
		m := rc.call(map[string]any{"op": op, "argv": []string{"sleep", "60"}, "buffer": 64 << 20})
		msg, _ := m["error"].(map[string]any)["message"].(string)
		if errorCode(m) != "limit" || !strings.Contains(msg, "retention budget") || !strings.Contains(msg, "16 MiB") {
			t.Fatalf("%s with a buffer beyond the budget: %v", op, m)
		}
	}
	if l := a.streams.List(""); len(l) != 0 {
		t.Fatalf("refused requests started %d streams", len(l))
	}
	m := rc.call(map[string]any{"op": "exec", "argv": []string{"echo", "ok"}, "buffer": 8 << 20})
	id := resultStream(t, m)
	if out, _ := rc.collect(id); string(out["stdout"]) != "ok\n" {
		t.Fatalf("exec with a buffer in the budget: %q", out["stdout"])
	}
	// Its reservation went back when it ended: another fits.
	m = rc.call(map[string]any{"op": "exec", "argv": []string{"true"}, "buffer": 12 << 20})
	if errorCode(m) != "" {
		t.Fatalf("after the first ended: %v", m)
	}
	rc.collect(resultStream(t, m))
}

// TestAckAfterEndLetsGo: an ack that arrives after the end event (the
// attachment is gone) still lets the stream's buffers go, all but a tail.
func TestAckAfterEndLetsGo(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	id := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"head", "-c", "300000", "/dev/zero"}}))
	out, end := rc.collect(id)
	if len(out["stdout"]) != 300000 || end["reason"] != "exit" {
		t.Fatalf("%d bytes, %v", len(out["stdout"]), end)
	}
	if a.streams.Budget().Stats().Ended < 300000 {
		t.Fatalf("before the ack: %+v", a.streams.Budget().Stats())
	}
	rc.send(map[string]any{"op": "ack", "stream": id, "cursors": map[string]any{"stdout": 300000, "stderr": 0}})
	deadline := time.Now().Add(10 * time.Second)
	for a.streams.Budget().Stats().Ended > stream.ReadTail {
		if time.Now().After(deadline) {
			t.Fatalf("after the ack: %+v", a.streams.Budget().Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if a.streams.Get(id) == nil {
		t.Fatal("the stream itself should stay, only most of its buffers go")
	}
}
