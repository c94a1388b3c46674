package endpoint

import (
	"errors"
	"strings"

	"github.com/coder/websocket"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// Input with offsets (protocol section 5): a client whose hello said
// input_offsets sends IN frames with the offset of their first byte. The
// stream's input writes each byte once and in order whatever connection
// brings it; every connection that fed it or attached it gets `input`
// events with the received and written cursors, every quarter of the
// input queue written, which open its window; an attach answers with the
// cursors, and the client sends again from `received`. A report never
// waits for its connection (reports.go): one client that stops reading
// holds up neither the input nor the others feeding it.

// OffsetInput is a stream input that takes offsets (a process's stdin, a
// terminal).
type OffsetInput interface {
	WriteInputAt(off uint64, p []byte) error
	Input() *stream.Input
}

// OffsetInputCloser ends numbered input at an offset (close_stdin with
// offset): a process's stdin.
type OffsetInputCloser interface {
	CloseInputAt(off uint64) error
}

// OffsetSessionInput is a connection-bound input that takes offsets (an
// upload).
type OffsetSessionInput interface {
	WriteInputAt(from any, off uint64, p []byte) error
}

// closeInputGap is the close code for a connection whose input frames
// left a gap: input was lost on the way, so the connection cannot be
// trusted; the client reconnects and sends again from `received`.
const closeInputGap websocket.StatusCode = 4002

// inputAt takes an IN frame with its offset.
func (ss *Session) inputAt(st *stream.Stream, off uint64, payload []byte) {
	var err error
	switch in := st.Control.(type) {
	case OffsetSessionInput:
		err = in.WriteInputAt(ss, off, payload)
	case OffsetInput:
		if in.Input() == nil {
			err = in.WriteInputAt(off, payload) // its error says why
			break
		}
		ss.feed(st.ID, in.Input())
		err = in.WriteInputAt(off, payload)
	default:
		err = wire.Errorf(wire.CodeBadRequest, "stream %d (%s) takes no input", st.ID, st.Kind)
	}
	if err == nil {
		return
	}
	ss.sendError(wire.AsError(err), st.ID)
	if errors.Is(err, stream.ErrInputGap) || isGap(err) {
		ss.closeWith(closeInputGap, "input frames left a gap: reconnect and send again from received")
	}
}

// isGap reports whether a protocol error reports an input gap (the
// managers' errors carry the stream package's wording).
func isGap(err error) bool {
	var we *wire.Error
	return errors.As(err, &we) && strings.Contains(we.Message, stream.ErrInputGap.Error())
}

// feed makes ss one of the connections told of in's progress, once per
// stream; inputs whose program ended are let go of on the way.
func (ss *Session) feed(id uint64, in *stream.Input) {
	ss.mu.Lock()
	if ss.closed {
		ss.mu.Unlock()
		return // finish has let go of every input already
	}
	if ss.feeding == nil {
		ss.feeding = map[uint64]*stream.Input{}
	}
	if ss.feeding[id] == in {
		ss.mu.Unlock()
		return
	}
	for old, fed := range ss.feeding {
		if fed.Ended() {
			delete(ss.feeding, old)
		}
	}
	ss.feeding[id] = in
	ss.mu.Unlock()
	in.Subscribe(ss, func(received, written uint64) { ss.reportInput(id, received, written) })
}

// unfeed stops every report to ss: the connection is gone.
func (ss *Session) unfeed() {
	ss.mu.Lock()
	feeding := ss.feeding
	ss.feeding = nil
	ss.mu.Unlock()
	for _, in := range feeding {
		in.Unsubscribe(ss)
	}
}

// inputCursors adds an input's cursors to an attach's or a create's
// answer and makes ss its feeder.
func (ss *Session) inputCursors(st *stream.Stream, result map[string]any) {
	in, ok := st.Control.(OffsetInput)
	if !ok || in.Input() == nil || st.Ended() != nil {
		return
	}
	ss.feed(st.ID, in.Input())
	result["received"], result["written"] = in.Input().Cursors()
}
