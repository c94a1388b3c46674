package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/wire"
)

// outputs are callbacks that consume byte channels, by channel number.
type outputs [wire.ChanData + 1]func([]byte)

// handle is the client side of one attachment, whatever the stream's kind:
// per-channel buffers fed by the reader goroutine, the end state, and the
// cursors that a reattach resumes from. Process (and the PTY, watch and
// kernel handles) wrap it.
type handle struct {
	c      *Client
	id     uint64
	kind   Kind
	window int // the attachment's window as the protocol counts it; 0: none
	bytes  [wire.ChanData + 1]*byteChan
	events *eventChan
	// onAttach, if set, gets each reattach's result on the reader
	// goroutine, before the stream's first frame on that connection.
	onAttach func(res json.RawMessage)
	// input numbers a process's or terminal's input (input.go); nil for
	// other kinds.
	input *inputFeed

	ackQueued  atomic.Bool // an immediate ack is queued
	lazyQueued atomic.Bool // a delayed ack is queued
	lastAck    []byte      // the last ack sent; the sender's own
	finished   atomic.Bool
	ended      atomic.Bool   // finished with the stream's end: acks still go out
	done       chan struct{} // closed by finish
	pumps      sync.WaitGroup
	pumpsDone  chan struct{} // closed when every output callback returned

	mu        sync.Mutex
	conn      *conn // the connection the stream is attached on, nil if none
	end       *End
	err       error
	detaching bool
	inputErr  error
	gaps      []GapError
}

// newHandle builds a handle reading from the from cursors and starts the
// callbacks in outs. The caller registers it with the client.
func newHandle(c *Client, cn *conn, id uint64, kind Kind, window int, from map[string]uint64, outs outputs) *handle {
	h := &handle{c: c, conn: cn, id: id, kind: kind, window: window, done: make(chan struct{}), pumpsDone: make(chan struct{})}
	if kind == KindProcess || kind == KindPTY {
		h.input = newInputFeed(h)
	}
	nums, events := channelsOf(kind)
	for _, n := range nums {
		name := wire.ChannelName(n)
		h.bytes[n] = newByteChan(h, name, from[name], window)
	}
	if events {
		h.events = newEventChan(h, "events", from["events"], window)
	}
	started := false
	for n, fn := range outs {
		if b := h.bytes[n]; b != nil && fn != nil {
			b.owned, started = true, true
			h.pumps.Add(1)
			go func() {
				defer h.pumps.Done()
				b.pump(fn)
			}()
		}
	}
	if started {
		go func() {
			h.pumps.Wait()
			close(h.pumpsDone)
		}()
	} else {
		close(h.pumpsDone)
	}
	return h
}

// byteChannel returns the channel with the wire number n, or nil.
func (h *handle) byteChannel(n byte) *byteChan {
	if int(n) < len(h.bytes) {
		return h.bytes[n]
	}
	return nil
}

// cursors returns every channel's received (consumed false) or consumed
// cursor, as protocol maps.
func (h *handle) cursors(consumed bool) map[string]uint64 {
	m := make(map[string]uint64, 2)
	for _, b := range h.bytes {
		if b != nil {
			r, c := b.cursors()
			m[b.name] = pick(consumed, c, r)
		}
	}
	if h.events != nil {
		r, c := h.events.cursors()
		m[h.events.name] = pick(consumed, c, r)
	}
	return m
}

// reattached starts every channel's window count anew, before an attach
// from the received cursors. No frame of h arrives meanwhile: its old
// connection is gone and the new one is not attached yet.
func (h *handle) reattached() {
	for _, b := range h.bytes {
		if b != nil {
			b.reattached()
		}
	}
	if h.events != nil {
		h.events.reattached()
	}
}

func pick(first bool, a, b uint64) uint64 {
	if first {
		return a
	}
	return b
}

func (h *handle) onGap(g gapMsg) {
	var err error
	if n, ok := wire.ChannelNumber(g.Channel); ok && h.bytes[n] != nil {
		err = h.bytes[n].gap(g.From, g.To)
	} else if h.events != nil && g.Channel == h.events.name {
		err = h.events.gap(g.From, g.To)
	} else {
		err = protocolErrorf("gap on stream %d's unknown channel %q", h.id, g.Channel)
	}
	if err != nil {
		h.violation(err)
		return
	}
	h.mu.Lock()
	h.gaps = append(h.gaps, GapError{Stream: h.id, Channel: g.Channel, From: g.From, To: g.To})
	h.mu.Unlock()
}

func (h *handle) onEvent(seq uint64, raw []byte) {
	if h.events == nil {
		h.violation(protocolErrorf("event with seq on stream %d (%s) which has no event channel", h.id, h.kind))
		return
	}
	if err := h.events.push(seq, raw); err != nil {
		h.violation(err)
	}
}

// onError records an error event about the stream. The agent sends those
// for refused input, so later writes fail with it rather than leave a
// hole in the input.
func (h *handle) onError(e *Error) {
	if isInputGap(e) || isStaleInput(e) {
		// The agent closes that connection, or another one attached
		// the stream since: input goes on from the reattach.
		h.c.log.Debug("input refused; resending after the reconnect", zap.Uint64("stream", h.id), zap.String("why", e.Message))
		return
	}
	h.mu.Lock()
	if h.inputErr == nil {
		h.inputErr = e
	}
	h.mu.Unlock()
	h.c.reportError(e)
}

func (h *handle) inputError() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inputErr
}

// onEnd handles the last frame of an attachment on cn.
func (h *handle) onEnd(cn *conn, e *End) {
	received := h.cursors(false)
	for name, cur := range e.Cursors {
		if got, ok := received[name]; ok && got != cur {
			h.violation(protocolErrorf("end of stream %d at %s cursor %d, but %d received", h.id, name, cur, got))
			return
		}
	}
	h.mu.Lock()
	if e.Reason == ReasonResume {
		// The stream lives on: the connection closes next and the
		// reconnect reattaches from the cursors.
		if h.conn == cn {
			h.conn = nil
		}
		h.mu.Unlock()
		return
	}
	detaching := h.detaching
	h.mu.Unlock()
	var err error
	if e.Reason == ReasonClosed && detaching {
		err = ErrDetached
	}
	h.finish(e, err)
}

// finish ends the handle: with the stream's end (err nil) or a failure.
// Readers get the buffered bytes, then err or io.EOF. Only the first call
// counts.
func (h *handle) finish(end *End, err error) {
	h.mu.Lock()
	if h.finished.Load() {
		h.mu.Unlock()
		return
	}
	h.end, h.err = end, err
	h.conn = nil
	h.ended.Store(end != nil && err == nil)
	h.finished.Store(true)
	close(h.done)
	h.mu.Unlock()
	readErr := err
	if readErr == nil {
		readErr = io.EOF
	}
	for _, b := range h.bytes {
		if b != nil {
			b.finish(readErr)
		}
	}
	if h.events != nil {
		h.events.finish(readErr)
	}
	h.c.removeHandle(h)
}

// violation fails the handle for a protocol violation and asks the agent
// to stop sending.
func (h *handle) violation(err error) {
	h.c.log.Warn("protocol violation", zap.Error(err))
	h.abandon(err)
}

// abandon fails the handle with err and asks the agent to stop sending,
// without waiting: for a caller that gave up on the stream.
func (h *handle) abandon(err error) {
	h.finish(nil, err)
	h.c.send.control("detach", h.id)
}

// requestAck queues an ack of the consumed cursors, at once or (lazy)
// after lazyAckDelay.
func (h *handle) requestAck(lazy bool) {
	switch {
	case !h.acking():
	case lazy:
		if h.lazyQueued.CompareAndSwap(false, true) {
			h.c.send.ack(h, true)
		}
	case h.ackQueued.CompareAndSwap(false, true):
		h.c.send.ack(h, false)
	}
}

// acking reports whether consumed bytes are still acknowledged: while the
// stream is attached, and after its end, so that the agent lets an ended
// stream's buffers go as soon as everything was read.
func (h *handle) acking() bool { return !h.finished.Load() || h.ended.Load() }

// appendAck encodes the ack of the consumed cursors.
func (h *handle) appendAck(b []byte) []byte {
	b = append(b, `{"op":"ack","stream":`...)
	b = strconv.AppendUint(b, h.id, 10)
	b = append(b, `,"cursors":{`...)
	first := true
	add := func(name string, cur uint64) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = strconv.AppendQuote(b, name)
		b = append(b, ':')
		b = strconv.AppendUint(b, cur, 10)
	}
	for _, ch := range h.bytes {
		if ch != nil {
			_, c := ch.cursors()
			add(ch.name, c)
		}
	}
	if h.events != nil {
		_, c := h.events.cursors()
		add(h.events.name, c)
	}
	return append(b, "}}"...)
}

// wait blocks until the handle finished and its callbacks returned.
func (h *handle) wait(ctx context.Context) (*End, error) {
	for _, ch := range []chan struct{}{h.done, h.pumpsDone} {
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.end, h.err
}

// detach ends the attachment; the stream keeps running on the agent.
func (h *handle) detach(ctx context.Context) error {
	h.mu.Lock()
	if h.finished.Load() {
		h.mu.Unlock()
		return nil
	}
	h.detaching = true
	h.mu.Unlock()
	_, err := h.c.call(ctx, "detach", streamRef{Stream: h.id}, callOpts{})
	switch {
	case err == nil:
	case HasCode(err, CodeNotFound), errors.Is(err, ErrConnectionLost):
		// Not attached on this connection: no end is coming.
		h.finish(nil, ErrDetached)
		return nil
	default:
		return fmt.Errorf("client: detach stream %d: %w", h.id, err)
	}
	select {
	case <-h.done: // the end follows the data already on its way
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// writeInput sends b as IN frames of at most 1 MiB, encoded in *frame
// (kept for reuse). Callers serialize their writes.
func (h *handle) writeInput(frame *[]byte, b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		if err := h.inputError(); err != nil {
			return written, err
		}
		if h.finished.Load() {
			return written, fmt.Errorf("client: stream %d has ended: %w", h.id, io.ErrClosedPipe)
		}
		ctx, cancel := context.WithTimeout(context.Background(), h.c.opts.WriteTimeout)
		cn, err := h.c.connection(ctx)
		cancel()
		if err != nil {
			return written, err
		}
		n := min(len(b), maxPayload)
		*frame = wire.AppendData((*frame)[:0], wire.Data{Type: wire.In, Stream: h.id, Channel: wire.ChanInput, Payload: b[:n]})
		if err := cn.write(websocket.MessageBinary, *frame); err != nil {
			return written, fmt.Errorf("%w: %w", ErrConnectionLost, err)
		}
		written += n
		b = b[n:]
	}
	return written, nil
}

func (h *handle) recordedGaps() []GapError {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]GapError(nil), h.gaps...)
}

// streamRef is the params of ops that name one stream.
type streamRef struct {
	Stream uint64 `json:"stream"`
}
