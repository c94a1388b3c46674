package endpoint

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/rayito/rayito-agent/internal/stream"
)

// briefAgent is an agent with one extra brief op, "test_block", that
// blocks until its test releases it: a filesystem call on a hung mount,
// without needing one.
func briefAgent(t *testing.T) (*testAgent, chan struct{}) {
	streams := stream.NewRegistryWith(stream.Limits{})
	srv := New(Config{Version: "test", Streams: streams})
	release := make(chan struct{})
	srv.ops["test_block"] = op{brief: true, fn: func(c *call) (any, error) {
		<-release
		return map[string]any{"released": true}, nil
	}}
	hs := serveNative(t, srv, streams.Close)
	return &testAgent{srv: srv, http: hs, streams: streams, url: "ws" + hs.URL[len("http"):]}, release
}

// A brief op that blocks holds up the rest of its connection only
// briefly: the reading passes to another goroutine, requests behind it
// are answered, and the blocked op still gets its answer when it returns.
func TestBlockedBriefOpLetsTheConnectionGoOn(t *testing.T) {
	a, release := briefAgent(t)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	rc := a.dial(t)
	first := rc.send(map[string]any{"op": "test_block"})
	if resp := rc.call(map[string]any{"op": "list"}); resp["result"] == nil {
		t.Fatalf("list behind a blocked op: %v", resp)
	}
	// The reader that took over passes the reading on again.
	second := rc.send(map[string]any{"op": "test_block"})
	if resp := rc.call(map[string]any{"op": "list"}); resp["result"] == nil {
		t.Fatalf("list behind two blocked ops: %v", resp)
	}
	if resp := rc.call(map[string]any{"op": "no_such_op"}); errorCode(resp) != "bad_request" {
		t.Fatalf("unknown op behind blocked ops: %v", resp)
	}
	close(release)
	released = true
	got := map[uint64]bool{}
	for len(got) < 2 {
		m := rc.readControl()
		id, _ := m["id"].(float64)
		if uint64(id) != first && uint64(id) != second {
			t.Fatalf("unexpected frame: %v", m)
		}
		if res, _ := m["result"].(map[string]any); res["released"] != true {
			t.Fatalf("blocked op's answer: %v", m)
		}
		got[uint64(id)] = true
	}
	// One goroutine reads: every request still gets exactly one answer,
	// in order, since these are answered on the reader.
	var ids []uint64
	for range 20 {
		ids = append(ids, rc.send(map[string]any{"op": "list"}))
	}
	for _, id := range ids {
		if m := rc.readControl(); m["id"] != float64(id) || m["result"] == nil {
			t.Fatalf("wanted the answer to %d, got %v", id, m)
		}
	}
	rc.c.CloseNow()
	deadline := time.Now().Add(10 * time.Second)
	for goroutinesIn("(*Session).readLoop") > 0 {
		if time.Now().After(deadline) {
			t.Fatal("a reader outlived its connection")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Brief ops count against the connection's in-flight limit like slow
// ones: blocked ones cannot pile up without bound.
func TestBlockedBriefOpsAreLimited(t *testing.T) {
	a, release := briefAgent(t)
	defer close(release)
	rc := a.dial(t)
	for range maxInflightOps {
		rc.send(map[string]any{"op": "test_block"})
	}
	if resp := rc.call(map[string]any{"op": "test_block"}); errorCode(resp) != "limit" {
		t.Fatalf("a blocked op over the limit: %v", resp)
	}
	if resp := rc.call(map[string]any{"op": "list"}); resp["result"] == nil {
		t.Fatalf("list with the limit reached: %v", resp)
	}
}

// A connection that closes while a brief op blocks ends its session at
// once: the op, when it returns, finds the session gone.
func TestBlockedBriefOpDoesNotHoldItsSession(t *testing.T) {
	a, release := briefAgent(t)
	defer close(release)
	rc := a.dial(t)
	rc.send(map[string]any{"op": "test_block"})
	if resp := rc.call(map[string]any{"op": "list"}); resp["result"] == nil {
		t.Fatalf("list behind a blocked op: %v", resp)
	}
	rc.c.Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(10 * time.Second)
	for len(a.srv.Sessions()) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the session outlived its connection while an op blocked")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIdleConnectionsStartNoOrderedWorker: a connection gets the worker
// of ordered ops (execute) with its first such op, so hundreds of idle
// connections do not each keep an idle goroutine and its stack.
func TestIdleConnectionsStartNoOrderedWorker(t *testing.T) {
	a := newTestAgent(t)
	before := goroutinesIn("(*Session).orderedLoop")
	conns := make([]*rawConn, 5)
	for i := range conns {
		conns[i] = a.dial(t)
		conns[i].call(map[string]any{"op": "list"})
	}
	if n := goroutinesIn("(*Session).orderedLoop"); n > before {
		t.Fatalf("%d ordered workers after 5 idle connections, %d before", n, before)
	}
	// An ordered op starts it (and still gets its answer).
	resp := conns[0].call(map[string]any{"op": "execute", "code": "1", "kernel": "k999"})
	if code := errorCode(resp); code != "not_found" {
		t.Fatalf("execute on an unknown kernel: %v", resp)
	}
	if goroutinesIn("(*Session).orderedLoop") == 0 {
		t.Fatal("no ordered worker after an execute")
	}
}

// goroutinesIn counts the goroutines whose stack holds fn.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<22)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, fn) {
			n++
		}
	}
	return n
}
