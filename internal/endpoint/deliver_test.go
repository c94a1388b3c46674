package endpoint

import (
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rayito/rayito-agent/internal/wire"
)

// TestDirectOutputWaitsForQueue: a little output for a connection is
// written by the goroutine that produced it (deliver) only when nothing
// waits for the writer. With a frame queued and the writer not yet at it,
// a command's echo goes behind that frame, not ahead of it.
func TestDirectOutputWaitsForQueue(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	id := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"cat"}, "stdin": true}))
	sessions := a.srv.Sessions()
	if len(sessions) != 1 {
		t.Fatalf("%d sessions", len(sessions))
	}
	ss := sessions[0]

	// The writer takes the next queued frame, then waits for release.
	taken, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func() { once.Do(func() { close(taken); <-release }) }
	ss.out.writerHook.Store(&hook)
	defer ss.out.writerHook.Store(nil)
	// A control frame that finds the connection being written queues.
	ss.out.writing.Lock()
	ss.sendControl([]byte(`{"event":"queued-first"}`))
	ss.out.writing.Unlock()
	<-taken

	// cat echoes a line: a little output, nobody writing, one frame
	// pending. It must queue behind that frame (the pump takes it).
	rc.sendRaw(websocket.MessageBinary, wire.AppendData(nil, wire.Data{Type: wire.In, Stream: id, Channel: wire.ChanInput, Payload: []byte("x\n")}))
	for deadline := time.Now().Add(5 * time.Second); ss.out.pending.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(release)

	m, d := rc.read()
	if m == nil || m["event"] != "queued-first" {
		t.Fatalf("first frame %v %+v, want the queued control frame", m, d)
	}
	if m, d = rc.read(); d == nil || d.Stream != id || string(d.Payload) != "x\n" || d.Offset != 0 {
		t.Fatalf("second frame %v %+v, want cat's echo", m, d)
	}
}
