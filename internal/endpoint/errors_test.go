package endpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rayito/rayito-agent/internal/wire"
)

// TestOpErrors sends each op of the protocol bad input and checks the
// documented error code; the connection keeps serving after each.
func TestOpErrors(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	running := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"sleep", "30"}, "attach": false}))
	t.Cleanup(func() { rc.call(map[string]any{"op": "signal", "stream": running, "signal": "SIGKILL"}) })
	cases := []struct {
		name string
		req  map[string]any
		code string
	}{
		{"unknown op", map[string]any{"op": "frobnicate"}, "bad_request"},
		{"unknown param", map[string]any{"op": "list", "bogus": 1}, "bad_request"},
		{"exec without argv", map[string]any{"op": "exec"}, "bad_request"},
		{"exec argv and cmd", map[string]any{"op": "exec", "argv": []string{"true"}, "cmd": "true"}, "bad_request"},
		{"exec missing program", map[string]any{"op": "exec", "argv": []string{"/no/such/program"}}, "bad_request"},
		{"exec missing cwd", map[string]any{"op": "exec", "argv": []string{"true"}, "cwd": "/no/such/dir"}, "bad_request"},
		{"exec missing user", map[string]any{"op": "exec", "argv": []string{"true"}, "user": "no-such-user-xyz"}, "bad_request"},
		{"exec bad overflow", map[string]any{"op": "exec", "argv": []string{"true"}, "overflow": "explode"}, "bad_request"},
		{"exec negative timeout", map[string]any{"op": "exec", "argv": []string{"true"}, "timeout_ms": -1}, "bad_request"},
		{"exec huge buffer", map[string]any{"op": "exec", "argv": []string{"true"}, "buffer": 1 << 30}, "bad_request"},
		{"pty too wide", map[string]any{"op": "pty", "cols": 70000, "rows": 24}, "bad_request"},
		{"pty zero rows", map[string]any{"op": "pty", "cols": 80, "rows": 0}, "bad_request"},
		{"pty missing user", map[string]any{"op": "pty", "user": "no-such-user-xyz"}, "bad_request"},
		{"resize unknown stream", map[string]any{"op": "resize", "stream": 999999, "cols": 80, "rows": 24}, "not_found"},
		{"resize a process", map[string]any{"op": "resize", "stream": running, "cols": 80, "rows": 24}, "bad_request"},
		{"signal unknown stream", map[string]any{"op": "signal", "stream": 999999, "signal": "SIGTERM"}, "not_found"},
		{"signal bad name", map[string]any{"op": "signal", "stream": running, "signal": "SIGNOPE"}, "bad_request"},
		{"signal missing stream", map[string]any{"op": "signal", "signal": "SIGTERM"}, "bad_request"},
		{"close_stdin without stdin", map[string]any{"op": "close_stdin", "stream": running}, "bad_request"},
		{"close_stdin unknown", map[string]any{"op": "close_stdin", "stream": 999999}, "not_found"},
		{"attach unknown stream", map[string]any{"op": "attach", "stream": 999999}, "not_found"},
		{"attach unknown pid", map[string]any{"op": "attach", "pid": 1 << 30}, "not_found"},
		{"attach unknown tag", map[string]any{"op": "attach", "tag": "nope"}, "not_found"},
		{"attach two selectors", map[string]any{"op": "attach", "stream": running, "tag": "x"}, "bad_request"},
		{"attach bad channel", map[string]any{"op": "attach", "stream": running, "from": map[string]int{"pty": 0}}, "bad_request"},
		{"attach cursor ahead", map[string]any{"op": "attach", "stream": running, "from": map[string]int{"stdout": 1 << 40}}, "bad_request"},
		{"attach negative window", map[string]any{"op": "attach", "stream": running, "window": -1}, "bad_request"},
		{"detach not attached", map[string]any{"op": "detach", "stream": running}, "not_found"},
		{"detach unknown", map[string]any{"op": "detach", "stream": 999999}, "not_found"},
		{"list bad kind type", map[string]any{"op": "list", "kind": 5}, "bad_request"},
		{"watch missing path", map[string]any{"op": "watch", "path": "/no/such/dir"}, "not_found"},
		{"watch relative path", map[string]any{"op": "watch", "path": "rel/dir"}, "bad_request"},
		{"watch a file", map[string]any{"op": "watch", "path": "/etc/passwd"}, "bad_request"},
		{"watch NUL in path", map[string]any{"op": "watch", "path": "/tmp/a\x00b"}, "bad_request"},
		{"attach unknown channel name", map[string]any{"op": "attach", "stream": running, "from": map[string]int{"bogus": 0}}, "bad_request"},
		{"watch no path", map[string]any{"op": "watch"}, "bad_request"},
		{"unwatch unknown", map[string]any{"op": "unwatch", "stream": 999999}, "not_found"},
		{"unwatch a process", map[string]any{"op": "unwatch", "stream": running}, "bad_request"},
		{"kernel_start unknown spec", map[string]any{"op": "kernel_start", "name": "no-such-kernel"}, "not_found"},
		{"kernel_interrupt unknown", map[string]any{"op": "kernel_interrupt", "kernel": "k999"}, "not_found"},
		{"kernel_restart unknown", map[string]any{"op": "kernel_restart", "kernel": "k999"}, "not_found"},
		{"kernel_shutdown unknown", map[string]any{"op": "kernel_shutdown", "kernel": "k999"}, "not_found"},
		{"kernel_shutdown no kernel", map[string]any{"op": "kernel_shutdown"}, "bad_request"},
		{"execute no code", map[string]any{"op": "execute"}, "bad_request"},
		{"execute unknown kernel", map[string]any{"op": "execute", "code": "1", "kernel": "k999"}, "not_found"},
		{"input_reply unknown", map[string]any{"op": "input_reply", "stream": 999999, "value": "x"}, "not_found"},
		{"input_reply no value", map[string]any{"op": "input_reply", "stream": running}, "bad_request"},
		{"input_reply to a process", map[string]any{"op": "input_reply", "stream": running, "value": "x"}, "bad_request"},
		{"kernel_channels unknown", map[string]any{"op": "kernel_channels", "kernel": "k999"}, "not_found"},
		{"jupyter_send unknown", map[string]any{"op": "jupyter_send", "stream": 999999, "msg": map[string]any{}}, "not_found"},
		{"jupyter_send to a process", map[string]any{"op": "jupyter_send", "stream": running, "msg": map[string]any{}}, "bad_request"},
	}
	// Every op's parameters, missing or out of range, in one style.
	for _, e := range a.srv.opTable() {
		if e.name == "ack" || e.name == "pty" || e.name == "kernel_start" {
			continue // ack answers with error events; the others start something with nothing
		}
		cases = append(cases,
			struct {
				name string
				req  map[string]any
				code string
			}{e.name + " with nothing", map[string]any{"op": e.name}, ""},
			struct {
				name string
				req  map[string]any
				code string
			}{e.name + " with a huge stream", map[string]any{"op": e.name, "stream": 1e20}, "bad_request"})
	}
	for _, c := range cases {
		resp := rc.call(c.req)
		got := errorCode(resp)
		if c.code != "" && got != c.code {
			t.Errorf("%s: got %v, want error %s", c.name, resp, c.code)
		}
		// A bad_request names its op first, in one style for all.
		if op, _ := c.req["op"].(string); got == "bad_request" && op != "frobnicate" {
			msg := fmt.Sprint(resp["error"].(map[string]any)["message"])
			if !strings.HasPrefix(msg, op+": ") && !strings.HasPrefix(msg, op+" ") {
				t.Errorf("%s: message %q does not start with the op", c.name, msg)
			}
		}
	}
	// Still serving.
	if resp := rc.call(map[string]any{"op": "list"}); resp["result"] == nil {
		t.Fatalf("connection broken after bad input: %v", resp)
	}
}

// TestMalformedFrames: frames that cannot be decoded get an error and the
// connection stays up; an oversized one closes only that connection.
func TestMalformedFrames(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	rc.sendRaw(websocket.MessageText, []byte(`{"id": 1, "op": `))
	if m := rc.readControl(); m["event"] != "error" || errorCode(m) != "bad_request" {
		t.Fatalf("malformed JSON: %v", m)
	}
	rc.sendRaw(websocket.MessageText, []byte(`{"id": 2, "op": "exec", "argv": 5}`))
	if m := rc.response(2); errorCode(m) != "bad_request" {
		t.Fatalf("wrong param type: %v", m)
	}
	rc.sendRaw(websocket.MessageText, []byte(`{"op": "list"}`))
	if m := rc.readControl(); m["event"] != "error" || errorCode(m) != "bad_request" {
		t.Fatalf("request without id: %v", m)
	}
	rc.sendRaw(websocket.MessageBinary, []byte{0x09, 0x01, 0x00})
	if m := rc.readControl(); m["event"] != "error" || errorCode(m) != "bad_request" {
		t.Fatalf("bad data frame: %v", m)
	}
	rc.sendRaw(websocket.MessageBinary, wire.AppendData(nil, wire.Data{Type: wire.In, Stream: 999999, Payload: []byte("x")}))
	if m := rc.readControl(); m["event"] != "error" || errorCode(m) != "not_found" || m["stream"].(float64) != 999999 {
		t.Fatalf("input to unknown stream: %v", m)
	}
	if resp := rc.call(map[string]any{"op": "list"}); resp["result"] == nil {
		t.Fatalf("connection broken: %v", resp)
	}

	other := a.dial(t)
	big := bytes.Repeat([]byte("x"), wire.MaxMessage+10)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc.c.Write(ctx, websocket.MessageBinary, append([]byte{0x02, 0x01, 0x00}, big...))
	_, _, err := rc.c.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusMessageTooBig {
		t.Fatalf("oversized frame: %v, want close 1009", err)
	}
	if resp := other.call(map[string]any{"op": "list"}); resp["result"] == nil {
		t.Fatalf("other client broken by an oversized frame: %v", resp)
	}
}

// TestKernelThroughEndpoint: the contract's own example, x = 42 then x.
func TestKernelThroughEndpoint(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	run := func(code string) []map[string]any {
		resp := rc.call(map[string]any{"op": "execute", "code": code})
		id := resultStream(t, resp)
		var events []map[string]any
		for {
			m := rc.readControl()
			if m["stream"] == nil || uint64(m["stream"].(float64)) != id {
				continue
			}
			if m["event"] == "end" {
				if m["reason"] != "done" || m["status"] != "ok" {
					t.Fatalf("cell %q ended %v", code, m)
				}
				return events
			}
			events = append(events, m)
			rc.send(map[string]any{"op": "ack", "stream": id, "cursors": map[string]any{"events": m["seq"]}})
		}
	}
	run("x = 42")
	events := run("x")
	if len(events) != 1 || events[0]["type"] != "result" || events[0]["data"].(map[string]any)["text/plain"] != "42" {
		t.Fatalf("x gave %v", events)
	}
	resp := rc.call(map[string]any{"op": "kernel_list"})
	ks := resp["result"].(map[string]any)["kernels"].([]any)
	if len(ks) != 1 || ks[0].(map[string]any)["state"] == "dead" {
		t.Fatalf("kernel_list %v", resp)
	}
}
