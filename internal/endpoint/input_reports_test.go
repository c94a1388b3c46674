package endpoint

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// feedWindowed sends the numbered input [from, to) to stream id as the
// SDK does: never more than the 1 MiB input window beyond what the agent
// reported written, in 256 KiB frames, waiting for `input` events to open
// the window. It fails (the read's own deadline, 20 s) when the reports
// stop coming.
func feedWindowed(t *testing.T, rc *rawConn, id uint64, from, to uint64) {
	t.Helper()
	const window, frame = 1 << 20, 256 << 10
	chunk := bytes.Repeat([]byte("i"), frame)
	sent, written := from, from
	for written < to {
		for sent < to && sent+frame-written <= window {
			rc.sendRaw(websocket.MessageBinary, inAt(id, sent, string(chunk)))
			sent += frame
		}
		m := rc.readControl()
		if m["event"] == "input" && uint64(m["stream"].(float64)) == id {
			written = max(written, uint64(m["written"].(float64)))
		}
		if m["event"] == "error" {
			t.Fatalf("input refused: %v", m)
		}
	}
}

// TestInputReportsReachTheWriter: the connection that writes a stream's
// input is told its progress whatever other connections do: one that
// only attaches (an observer) does not take the reports away from it,
// and one attached that stops reading holds up neither the input nor the
// writer.
func TestInputReportsReachTheWriter(t *testing.T) {
	t.Run("observer", func(t *testing.T) {
		a := newTestAgent(t)
		writer := a.dial(t)
		id := resultStream(t, writer.call(map[string]any{"op": "exec", "argv": []string{"sh", "-c", "cat >/dev/null"}, "stdin": true}))
		observer := a.dial(t)
		result(t, observer.call(map[string]any{"op": "attach", "stream": id}))
		feedWindowed(t, writer, id, 0, 8<<20)
		observer.c.CloseNow()
		feedWindowed(t, writer, id, 8<<20, 16<<20) // and after the observer left
	})
	t.Run("stalled reader", func(t *testing.T) {
		a := newTestAgent(t)
		writer := a.dial(t)
		id := resultStream(t, writer.call(map[string]any{"op": "exec", "argv": []string{"sh", "-c", "cat >/dev/null"}, "stdin": true}))
		// The stalled client: attached to the input's stream and to a
		// flood it does not read (no window), so its connection is full
		// and its writer blocked for good.
		stalled := a.dial(t)
		flood := resultStream(t, stalled.call(map[string]any{"op": "exec", "argv": []string{"yes"}, "overflow": "drop", "attach": false}))
		result(t, stalled.call(map[string]any{"op": "attach", "stream": id}))
		result(t, stalled.call(map[string]any{"op": "attach", "stream": flood, "window": 0}))
		// 300 reports, more than a control queue holds.
		feedWindowed(t, writer, id, 0, 75<<20)
		writer.call(map[string]any{"op": "signal", "stream": flood, "signal": "SIGKILL"})
	})
}

// TestUnreadInputCountsAndGoes: input sent to programs that never read it
// counts against the retention budget while they run and is let go of
// when they end, not kept with their ended streams.
func TestUnreadInputCountsAndGoes(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	var ids []uint64
	for range 20 {
		id := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"sleep", "60"}, "stdin": true}))
		// The pipe grows to 1 MiB once input waits (proc's pipeSize) and
		// takes that much; the rest waits in the agent.
		chunk := string(bytes.Repeat([]byte("u"), 900<<10))
		rc.sendRaw(websocket.MessageBinary, inAt(id, 0, chunk))
		rc.sendRaw(websocket.MessageBinary, inAt(id, 900<<10, chunk))
		ids = append(ids, id)
	}
	// 20 x 1,800 KiB, less what the pipes took (a little over 1 MiB
	// each: 350 KiB each stayed in the agent here).
	deadline := time.Now().Add(20 * time.Second)
	for a.streams.Budget().Stats().Input < 2<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("budget %+v: unread input is not counted", a.streams.Budget().Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, id := range ids {
		result(t, rc.call(map[string]any{"op": "signal", "stream": id, "signal": "SIGKILL"}))
	}
	for _, id := range ids {
		if _, end := wholeOutput(t, a, id); end["signal"] != "SIGKILL" {
			t.Fatalf("end %v", end)
		}
	}
	if st := a.streams.Budget().Stats(); st.Input != 0 {
		t.Fatalf("budget %+v after the programs ended, want no input held", st)
	}
}

// TestFileWriteEndsAtItsLength: a file_write's close_stdin with the
// input's length, arriving before the input (as after a cut, when the
// client sends its input again on a new connection), commits the whole
// file once the input is there, not the nothing received so far.
func TestFileWriteEndsAtItsLength(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	path := filepath.Join(t.TempDir(), "w737")
	id := resultStream(t, rc.call(map[string]any{"op": "file_write", "path": path}))
	if r := rc.call(map[string]any{"op": "close_stdin", "stream": id, "offset": 3}); errorCode(r) != "" {
		t.Fatalf("close_stdin ahead of the input: %v", r)
	}
	rc.sendRaw(websocket.MessageBinary, inAt(id, 0, "737"))
	_, end := rc.collect(id)
	if end["reason"] != "done" || end["size"] != float64(3) {
		t.Fatalf("end %v", end)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "737" {
		t.Fatalf("file %q %v", b, err)
	}
}
