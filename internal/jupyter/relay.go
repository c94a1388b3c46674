package jupyter

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// relayRequests bounds how many of a relay's request ids are remembered
// for routing replies; a client that never waits for replies cannot grow
// the routing table.
const relayRequests = 1024

// Relay is the Control of a kernel_channels stream: raw Jupyter messages
// both ways. Every iopub message of the kernel, and the shell, control and
// stdin messages answering requests sent through this relay, become
// `jupyter` events on the stream. Send and Close are safe for concurrent
// use; the relay lives across restarts and ends when the kernel is shut
// down or Close is called.
type Relay struct {
	k   *Kernel
	s   *stream.Stream
	log *stream.Log

	mu    sync.Mutex
	sent  []sentRequest // oldest first
	ended bool
}

type sentRequest struct {
	conn  *client
	msgID string
}

func newRelay(k *Kernel) *Relay {
	r := &Relay{k: k}
	r.s = k.m.reg.Create(stream.Config{
		Kind:     stream.KindChannels,
		Channels: []stream.ChannelSpec{{Name: EventsChannel, Unit: stream.Events, Policy: stream.Drop}},
		Control:  r,
	})
	r.log = r.s.Log(EventsChannel)
	return r
}

// Stream returns the relay's stream.
func (r *Relay) Stream() *stream.Stream { return r.s }

// Send signs msg and sends it to the kernel. msg is
// {"channel", "header", "parent_header", "metadata", "content"} with
// optional base64 "buffers"; channel is shell, control or stdin, and
// header needs at least msg_type (msg_id, session, date, username and
// version are filled in when missing).
func (r *Relay) Send(ctx context.Context, msg json.RawMessage) error {
	var m Msg
	if err := json.Unmarshal(msg, &m); err != nil {
		return wire.Errorf(wire.CodeBadRequest, "jupyter message: %v", err)
	}
	return r.SendMsg(ctx, m)
}

// SendMsg is Send for a message already split into its parts. A message
// sent while the kernel (re)starts waits for the new process, within ctx
// and the bound of a start; then it is unavailable.
func (r *Relay) SendMsg(ctx context.Context, in Msg) error {
	ch := channel(in.Channel)
	if ch != chShell && ch != chControl && ch != chStdin {
		return wire.Errorf(wire.CodeBadRequest, "jupyter message: channel must be shell, control or stdin, not %q", in.Channel)
	}
	ctx, cancel := context.WithTimeout(ctx, r.k.m.startTimeout)
	inst, err := r.k.currentWait(ctx)
	cancel()
	if err != nil {
		return err
	}
	m, err := r.toMessage(in, inst.conn.session)
	if err != nil {
		return err
	}
	r.mu.Lock()
	if r.ended {
		r.mu.Unlock()
		return wire.Errorf(wire.CodeNotFound, "kernel_channels stream %d was closed", r.s.ID)
	}
	if !inst.conn.claim(m.MsgID, r) {
		r.mu.Unlock()
		return wire.Errorf(wire.CodeConflict, "jupyter message: msg_id %q is in use by another request to kernel %s", m.MsgID, r.k.id)
	}
	r.sent = append(r.sent, sentRequest{inst.conn, m.MsgID})
	if len(r.sent) > relayRequests {
		old := r.sent[0]
		old.conn.unregister(old.msgID)
		r.sent = r.sent[1:]
	}
	r.mu.Unlock()
	if err := inst.conn.send(ch, m); err != nil {
		return wire.Errorf(wire.CodeUnavailable, "send to kernel %s: %v", r.k.id, err)
	}
	return nil
}

// toMessage validates a client's message and completes its header.
func (r *Relay) toMessage(in Msg, session string) (*message, error) {
	h := map[string]any{}
	if len(in.Header) > 0 {
		if err := json.Unmarshal(in.Header, &h); err != nil {
			return nil, wire.Errorf(wire.CodeBadRequest, "jupyter message: header must be an object: %v", err)
		}
	}
	msgType, _ := h["msg_type"].(string)
	if msgType == "" {
		return nil, wire.Errorf(wire.CodeBadRequest, "jupyter message: header.msg_type is required")
	}
	msgID, _ := h["msg_id"].(string)
	if msgID == "" {
		msgID = newID()
	}
	defaults := map[string]any{"msg_id": msgID, "session": session, "username": username, "date": timestamp(), "version": protocolVersion}
	for key, v := range defaults {
		if s, _ := h[key].(string); s == "" {
			h[key] = v
		}
	}
	m := &message{Header: marshalContent(h), MsgID: msgID, MsgType: msgType}
	parts := []struct {
		name string
		raw  json.RawMessage
		dst  *json.RawMessage
	}{{"parent_header", in.Parent, &m.Parent}, {"metadata", in.Metadata, &m.Metadata}, {"content", in.Content, &m.Content}}
	for _, p := range parts {
		raw := bytes.TrimSpace(p.raw)
		if len(raw) == 0 || string(raw) == "null" {
			raw = json.RawMessage("{}")
		}
		if raw[0] != '{' {
			return nil, wire.Errorf(wire.CodeBadRequest, "jupyter message: %s must be an object", p.name)
		}
		*p.dst = raw
	}
	m.Buffers = in.Buffers
	return m, nil
}

// deliver receives replies to this relay's requests; iopub comes through
// publish, which every relay gets.
func (r *Relay) deliver(ch channel, m *message) {
	if ch != chIOPub {
		r.publish(ch, m)
	}
}

// publish appends one message to the relay's stream, in Msg.Encode's
// framing.
func (r *Relay) publish(ch channel, m *message) {
	if !isObject(m.Metadata) || !isObject(m.Content) {
		return // the kernel sent parts that are not JSON objects
	}
	ev := Msg{Channel: string(ch), Header: m.Header, Parent: m.Parent, Metadata: m.Metadata, Content: m.Content, Buffers: m.Buffers}.Encode()
	r.log.Append(func(uint64) []byte { return ev })
}

// Close ends the relay's stream with reason closed.
func (r *Relay) Close() error {
	r.k.mu.Lock()
	delete(r.k.relays, r)
	r.k.mu.Unlock()
	r.end(stream.End{Reason: stream.ReasonClosed})
	return nil
}

func (r *Relay) end(e stream.End) {
	r.mu.Lock()
	sent := r.sent
	r.sent, r.ended = nil, true
	r.mu.Unlock()
	for _, s := range sent {
		s.conn.unregister(s.msgID)
	}
	r.s.Finish(e)
}
