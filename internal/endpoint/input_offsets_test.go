package endpoint

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rayito/rayito-agent/internal/wire"
)

func inAt(stream, off uint64, s string) []byte {
	return wire.AppendData(nil, wire.Data{Type: wire.InAt, Stream: stream, Channel: wire.ChanInput, Offset: off, Payload: []byte(s)})
}

// TestInputOffsets: numbered input is written once and in order: what
// was received already is dropped, overlaps are cut, a frame that would
// leave a gap is refused (nothing written, the connection closed with
// 4002 so the client sends again from received), a second connection
// attaching gets the cursors and goes on, and an end of input sent ahead
// of its data waits for it.
func TestInputOffsets(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	if rc.hello["input_offsets"] != true {
		t.Fatalf("hello %v does not say input_offsets", rc.hello)
	}
	res := result(t, rc.call(map[string]any{"op": "exec", "argv": []string{"cat"}, "stdin": true}))
	id := uint64(res["stream"].(float64))
	if res["received"] != float64(0) || res["written"] != float64(0) {
		t.Fatalf("exec with stdin answers %v, want received and written 0", res)
	}
	rc.sendRaw(websocket.MessageBinary, inAt(id, 0, "hello "))
	rc.sendRaw(websocket.MessageBinary, inAt(id, 0, "hello ")) // again: dropped
	rc.sendRaw(websocket.MessageBinary, inAt(id, 3, "lo world\n"))
	rc.sendRaw(websocket.MessageBinary, inAt(id, 100, "lost"))
	for {
		m := rc.readControl()
		if m["event"] == "error" {
			e := m["error"].(map[string]any)
			if !strings.Contains(e["message"].(string), "would leave a gap") || e["code"] != "bad_request" {
				t.Fatalf("gap refused with %v", m)
			}
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// cat's echo of the accepted bytes may still arrive before the close.
	var err error
	for err == nil {
		_, _, err = rc.c.Read(ctx)
	}
	if websocket.CloseStatus(err) != closeInputGap {
		t.Fatalf("after a gap the connection should close with %d: %v", closeInputGap, err)
	}

	rc2 := a.dial(t)
	att := result(t, rc2.call(map[string]any{"op": "attach", "stream": id}))
	if att["received"] != float64(12) {
		t.Fatalf("attach answers %v, want received 12", att)
	}
	// The end of input first, then the data before it, as a reconnecting
	// client's frames may arrive: the end waits for the data.
	if r := rc2.call(map[string]any{"op": "close_stdin", "stream": id, "offset": 18}); errorCode(r) != "" {
		t.Fatalf("close_stdin ahead of its data: %v", r)
	}
	rc2.sendRaw(websocket.MessageBinary, inAt(id, 12, "again\n"))
	if got, end := wholeOutput(t, a, id); got != "hello world\nagain\n" || end["reason"] != "exit" {
		t.Fatalf("cat wrote %q, end %v", got, end)
	}
}

// wholeOutput waits for a stream's end on a connection of its own and
// returns its stdout from the start (calls on other connections skip the
// data frames they meet).
func wholeOutput(t *testing.T, a *testAgent, id uint64) (string, map[string]any) {
	t.Helper()
	rc := a.dial(t)
	result(t, rc.call(map[string]any{"op": "attach", "stream": id, "from": map[string]any{"stdout": 0}}))
	out, end := rc.collect(id)
	return string(out["stdout"]), end
}

// TestInputOffsetErrors: an end of input below what was received is a
// conflict; numbered input to a stream without stdin is refused; plain IN
// frames still work beside numbered ones (clients that do not opt in).
func TestInputOffsetErrors(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	id := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"cat"}, "stdin": true}))
	rc.sendRaw(websocket.MessageBinary, inAt(id, 0, "abc"))
	rc.sendRaw(websocket.MessageBinary, wire.AppendData(nil, wire.Data{Type: wire.In, Stream: id, Channel: wire.ChanInput, Payload: []byte("def\n")}))
	if r := rc.call(map[string]any{"op": "close_stdin", "stream": id, "offset": 2}); errorCode(r) != "conflict" {
		t.Fatalf("close_stdin below received: %v", r)
	}
	if r := rc.call(map[string]any{"op": "close_stdin", "stream": id, "offset": 7}); errorCode(r) != "" {
		t.Fatalf("close_stdin at received: %v", r)
	}
	if got, _ := wholeOutput(t, a, id); got != "abcdef\n" {
		t.Fatalf("cat wrote %q", got)
	}
	noStdin := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"sleep", "5"}}))
	rc.sendRaw(websocket.MessageBinary, inAt(noStdin, 0, "x"))
	for {
		m := rc.readControl()
		if m["event"] == "error" {
			if !strings.Contains(m["error"].(map[string]any)["message"].(string), "without stdin") {
				t.Fatalf("numbered input without stdin: %v", m)
			}
			break
		}
	}
	rc.call(map[string]any{"op": "signal", "stream": noStdin, "signal": "SIGKILL"})
}

// TestInputTwoFeeders: two connections attached to one stream send the
// same input, overlapping and interleaved, as an old connection's frames
// still arrive while a reconnected one sends again: every byte reaches
// the program once and in order, whichever frames the agent reads first.
func TestInputTwoFeeders(t *testing.T) {
	a := newTestAgent(t)
	rc1 := a.dial(t)
	id := resultStream(t, rc1.call(map[string]any{"op": "exec", "argv": []string{"cat"}, "stdin": true}))
	rc2 := a.dial(t)
	if att := result(t, rc2.call(map[string]any{"op": "attach", "stream": id})); att["received"] != float64(0) {
		t.Fatalf("attach: %v", att)
	}
	const text = "0123456789abcdefghijklmnopqrstuvwxyz\n"
	at := func(from, to int) []byte { return inAt(id, uint64(from), text[from:to]) }
	rc1.sendRaw(websocket.MessageBinary, at(0, 10))
	rc2.sendRaw(websocket.MessageBinary, at(0, 20))
	rc1.sendRaw(websocket.MessageBinary, at(10, 30))
	rc2.sendRaw(websocket.MessageBinary, at(20, len(text)))
	rc1.sendRaw(websocket.MessageBinary, at(30, len(text)))
	if r := rc2.call(map[string]any{"op": "close_stdin", "stream": id, "offset": len(text)}); errorCode(r) != "" {
		t.Fatal(r)
	}
	if r := rc1.call(map[string]any{"op": "close_stdin", "stream": id, "offset": len(text)}); errorCode(r) != "" {
		t.Fatalf("the same end of input from the other connection: %v", r)
	}
	if got, _ := wholeOutput(t, a, id); got != text {
		t.Fatalf("cat wrote %q, want %q", got, text)
	}
}

// close_stdin's answers do not depend on how it is asked: on a terminal
// it is unsupported with an offset or without, and an offset past any
// input (2^63 and up, which read as none) is a bad_request that changes
// nothing.
func TestCloseStdinAnswers(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	rc := a.dial(t)
	pty := resultStream(t, rc.call(map[string]any{"op": "pty", "argv": []string{"cat"}}))
	for _, req := range []map[string]any{
		{"op": "close_stdin", "stream": pty},
		{"op": "close_stdin", "stream": pty, "offset": 0},
	} {
		if r := rc.call(req); errorCode(r) != "unsupported" {
			t.Errorf("%v on a pty: %v, want unsupported", req, r)
		}
	}
	cat := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"cat"}, "stdin": true}))
	if r := rc.call(map[string]any{"op": "close_stdin", "stream": cat, "offset": uint64(1) << 63}); errorCode(r) != "bad_request" {
		t.Fatalf("close_stdin at 2^63: %v, want bad_request", r)
	}
	if r := rc.call(map[string]any{"op": "close_stdin", "stream": cat, "offset": 0}); r["error"] != nil {
		t.Fatalf("close_stdin at 0 after the refused one: %v", r)
	}
	if _, end := rc.collect(cat); end["reason"] != "exit" {
		t.Fatalf("cat after close_stdin: %v", end)
	}
}
