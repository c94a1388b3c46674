package jupyter

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/rayito/rayito-agent/internal/stream"
)

// sender is what the endpoint asserts on a kernel_channels stream's Control.
type sender interface {
	Send(ctx context.Context, msg json.RawMessage) error
}

func TestRelayBothWays(t *testing.T) {
	t.Parallel()
	k := sharedKernel(t)
	rs, err := env.mgr.Channels(k.ID())
	if err != nil {
		t.Fatal(err)
	}
	if rs.Kind != stream.KindChannels {
		t.Fatalf("kind %s", rs.Kind)
	}
	relay, ok := rs.Control.(sender)
	if !ok {
		t.Fatalf("Control %T has no Send", rs.Control)
	}
	msgID := "relay-" + newID()
	req := fmt.Sprintf(`{"channel":"shell","header":{"msg_type":"execute_request","msg_id":%q},"parent_header":{},"metadata":{},
		"content":{"code":"relay_v = 6 * 7\nrelay_v","silent":false,"store_history":true,"user_expressions":{},"allow_stdin":false}}`, msgID)
	if err := relay.Send(context.Background(), json.RawMessage(req)); err != nil {
		t.Fatal(err)
	}

	r := attach(t, rs, 0)
	var result string
	var replied, idle bool
	for !replied || !idle {
		ev, end := r.next()
		if end != nil {
			t.Fatalf("relay ended: %+v", end)
		}
		if ev.Event != "jupyter" || ev.Msg == nil {
			t.Fatalf("not a jupyter event: %+v", ev)
		}
		var parent, head struct {
			MsgID   string `json:"msg_id"`
			MsgType string `json:"msg_type"`
		}
		json.Unmarshal(ev.Msg.Parent, &parent)
		json.Unmarshal(ev.Msg.Header, &head)
		if parent.MsgID != msgID {
			continue // other tests share this kernel's iopub
		}
		var body struct {
			Status         string            `json:"status"`
			ExecutionState string            `json:"execution_state"`
			Data           map[string]string `json:"data"`
		}
		json.Unmarshal(ev.Msg.Content, &body)
		switch {
		case ev.Msg.Channel == "iopub" && head.MsgType == "execute_result":
			result = body.Data["text/plain"]
		case ev.Msg.Channel == "iopub" && head.MsgType == "status" && body.ExecutionState == "idle":
			idle = true
		case ev.Msg.Channel == "shell" && head.MsgType == "execute_reply":
			if body.Status != "ok" {
				t.Fatalf("execute_reply %s", ev.Msg.Content)
			}
			replied = true
		}
	}
	if result != "42" {
		t.Fatalf("relayed result %q", result)
	}

	for _, bad := range []string{
		`not json`,
		`{"channel":"iopub","header":{"msg_type":"execute_request"},"content":{}}`,
		`{"channel":"shell","header":{},"content":{}}`,
		`{"channel":"shell","header":{"msg_type":"kernel_info_request"},"content":[1]}`,
		`{"channel":"shell","header":{"msg_type":"kernel_info_request"},"buffers":["%%%"]}`,
	} {
		wantCode(t, relay.Send(context.Background(), json.RawMessage(bad)), "bad_request")
	}

	rs.Control.(*Relay).Close()
	if end := rs.Ended(); end == nil || end.Reason != stream.ReasonClosed {
		t.Fatalf("closed relay end %+v", end)
	}
	wantCode(t, relay.Send(context.Background(), json.RawMessage(req)), "not_found")
}

// TestRelaySurvivesBadMessages: every bad message a client sends gets a
// bad_request or conflict error, and the relay (and the cells of the
// kernel) go on working after them.
func TestRelaySurvivesBadMessages(t *testing.T) {
	t.Parallel()
	k := sharedKernel(t)
	rs, err := env.mgr.Channels(k.ID())
	if err != nil {
		t.Fatal(err)
	}
	relay := rs.Control.(*Relay)
	defer relay.Close()

	// A cell in flight: a message reusing its msg_id must not take its
	// replies away (the cell would never end).
	cs, _ := execute(t, k.ID(), "import time\nprint('started', flush=True)\ntime.sleep(0.5)\nprint('done')", 0, false)
	cr := attach(t, cs, 0)
	cr.untilStdout("started\n")
	c := cs.Control.(*cell)
	c.mu.Lock()
	cellID := c.msgID
	c.mu.Unlock()
	steal := fmt.Sprintf(`{"channel":"shell","header":{"msg_type":"kernel_info_request","msg_id":%q},"content":{}}`, cellID)
	wantCode(t, relay.Send(context.Background(), json.RawMessage(steal)), "conflict")

	for _, bad := range []string{
		`{"channel":"shell","header":{"msg_type":"kernel_info_request"}`,
		`[]`,
		`null`,
		`{"channel":"hb","header":{"msg_type":"ping"}}`,
		`{"channel":"iopub","header":{"msg_type":"status"}}`,
		`{"channel":"nope","header":{"msg_type":"kernel_info_request"}}`,
		`{"channel":"shell","header":"kernel_info_request"}`,
		`{"channel":"shell","header":{"msg_type":7}}`,
		`{"channel":"shell","header":{"msg_type":"kernel_info_request"},"metadata":"x"}`,
		`{"channel":"shell","header":{"msg_type":"kernel_info_request"},"parent_header":[]}`,
	} {
		wantCode(t, relay.Send(context.Background(), json.RawMessage(bad)), "bad_request")
	}
	evs, end := cr.all()
	wantStatus(t, end, StatusOK)
	if stdout(evs) != "done\n" {
		t.Fatalf("cell after the relay's bad messages: %+v", evs)
	}

	msgID := "after-bad-" + newID()
	good := fmt.Sprintf(`{"channel":"shell","header":{"msg_type":"kernel_info_request","msg_id":%q},"content":{}}`, msgID)
	if err := relay.Send(context.Background(), json.RawMessage(good)); err != nil {
		t.Fatal(err)
	}
	r := attach(t, rs, 0)
	for {
		ev, end := r.next()
		if end != nil {
			t.Fatalf("relay ended: %+v", end)
		}
		var parent, head struct {
			MsgID   string `json:"msg_id"`
			MsgType string `json:"msg_type"`
		}
		json.Unmarshal(ev.Msg.Parent, &parent)
		json.Unmarshal(ev.Msg.Header, &head)
		if ev.Msg.Channel == "shell" && parent.MsgID == msgID && head.MsgType == "kernel_info_reply" {
			break
		}
		if ev.Msg.Channel == "shell" && parent.MsgID == cellID {
			t.Fatalf("the relay got the cell's reply: %+v", ev.Msg)
		}
	}
}

// A cell that asks for input gets it through the relay: the kernel's
// input_request arrives as a stdin event, and the client's input_reply,
// sent on the stdin channel, is what input() returns.
func TestRelayStdinRoundTrip(t *testing.T) {
	t.Parallel()
	k := sharedKernel(t)
	rs, err := env.mgr.Channels(k.ID())
	if err != nil {
		t.Fatal(err)
	}
	relay := rs.Control.(*Relay)
	defer relay.Close()
	r := attach(t, rs, 0)
	msgID := "stdin-" + newID()
	req := fmt.Sprintf(`{"channel":"shell","header":{"msg_type":"execute_request","msg_id":%q},
		"content":{"code":"relay_name = input('name? ')\nrelay_name.upper()","silent":false,"store_history":true,"user_expressions":{},"allow_stdin":true}}`, msgID)
	if err := relay.Send(context.Background(), json.RawMessage(req)); err != nil {
		t.Fatal(err)
	}
	var result string
	var replied bool
	for !replied || result == "" {
		ev, end := r.next()
		if end != nil {
			t.Fatalf("relay ended: %+v", end)
		}
		var parent, head struct {
			MsgID   string `json:"msg_id"`
			MsgType string `json:"msg_type"`
		}
		json.Unmarshal(ev.Msg.Parent, &parent)
		json.Unmarshal(ev.Msg.Header, &head)
		if parent.MsgID != msgID {
			continue
		}
		var body struct {
			Prompt string            `json:"prompt"`
			Status string            `json:"status"`
			Data   map[string]string `json:"data"`
		}
		json.Unmarshal(ev.Msg.Content, &body)
		switch {
		case ev.Msg.Channel == "stdin" && head.MsgType == "input_request":
			if body.Prompt != "name? " {
				t.Fatalf("input_request prompt %q", body.Prompt)
			}
			reply := fmt.Sprintf(`{"channel":"stdin","header":{"msg_type":"input_reply"},"parent_header":%s,"content":{"value":"ada"}}`, ev.Msg.Header)
			if err := relay.Send(context.Background(), json.RawMessage(reply)); err != nil {
				t.Fatalf("input_reply on the stdin channel: %v", err)
			}
		case ev.Msg.Channel == "iopub" && head.MsgType == "execute_result":
			result = body.Data["text/plain"]
		case ev.Msg.Channel == "shell" && head.MsgType == "execute_reply":
			if body.Status != "ok" {
				t.Fatalf("execute_reply %s", ev.Msg.Content)
			}
			replied = true
		}
	}
	if result != "'ADA'" {
		t.Fatalf("input() through the relay gave %s", result)
	}
}
