package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/coder/websocket"

	"github.com/rayito/rayito-agent/internal/wire"
)

// Input with offsets (protocol section 5), for a process's stdin and a
// terminal: every IN frame says where its bytes start, so the agent
// writes each byte once and in order whatever connection brings it. The
// client keeps what it sent until the agent reports it written (`input`
// events, every quarter of the agent's 1 MiB queue), never has more than
// that queue in flight (a Write waits for room instead of failing), and
// after a reconnect or a resume sends again from what the agent says it
// received. Agents whose hello does not say input_offsets get plain IN
// frames, as before.

// inputWindow is what may be sent and not yet written: the agent's input
// queue (stream.DefaultInputQueue).
const inputWindow = 1 << 20

// inputChunk bounds one IN frame, so the window opens in steps.
const inputChunk = 256 << 10

// inChunk is input sent and not yet written, starting at off.
type inChunk struct {
	off uint64
	buf *[]byte // from inChunks
}

// inChunks recycles the chunks: bulk input would otherwise allocate its
// whole size.
var inChunks = sync.Pool{New: func() any { b := make([]byte, 0, inputChunk); return &b }}

// inputFeed is the client side of one stream's numbered input.
type inputFeed struct {
	h      *handle
	sendMu sync.Mutex // frames go out in offset order
	frame  []byte     // under sendMu

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on progress, reattach, end
	written uint64        // what the agent reported written
	sent    uint64        // what callers handed over
	base    uint64        // the offset of kept[0]
	kept    []inChunk     // input [base, sent) in order, kept until written
	cn      *conn         // the connection the stream is attached on
	next    uint64        // what went out on cn so far
	// numbering: the agent answered the create or attach with the input's
	// cursors, so this stream's input is numbered.
	numbering bool
}

func newInputFeed(h *handle) *inputFeed {
	return &inputFeed{h: h, changed: make(chan struct{})}
}

func (f *inputFeed) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// write hands b over, waiting for room while the agent's queue is full;
// ok is false if the connection's agent does not number input (the caller
// falls back to plain frames).
//
// Bytes handed over while the stream runs are written: the program may
// then read them and end before write returns, which is no error (as a
// pipe's write succeeds whether or not its reader goes on to read).
func (f *inputFeed) write(ctx context.Context, b []byte) (n int, ok bool, err error) {
	for len(b) > 0 {
		if err := f.usable(); err != nil && f.numbered() {
			return n, true, err
		}
		f.mu.Lock()
		ch := f.changed
		if !f.numbering {
			f.mu.Unlock()
			return n, false, nil
		}
		room := int(min(uint64(inputWindow)-min(f.sent-f.written, inputWindow), uint64(inputChunk)))
		if room > 0 {
			k := min(room, len(b))
			f.keepLocked(b[:k])
			f.sent += uint64(k)
			f.mu.Unlock()
			n += k
			b = b[k:]
			f.flush()
			continue
		}
		f.mu.Unlock()
		if err := f.usable(); err != nil {
			return n, true, err
		}
		select {
		case <-ch:
		case <-f.h.done:
		case <-ctx.Done():
			return n, true, fmt.Errorf("client: input of stream %d: the program has not read what was sent (%d bytes waiting): %w", f.h.id, inputWindow, ctx.Err())
		}
	}
	return n, true, f.h.inputError()
}

// numbered reports whether this stream's input is numbered.
func (f *inputFeed) numbered() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.numbering
}

// keepLocked keeps p, which starts at f.sent: in the last chunk while it
// has room (keystrokes fill one chunk rather than taking one each), else
// in new ones. Appending within the chunk's capacity leaves the bytes a
// frame in flight holds untouched.
func (f *inputFeed) keepLocked(p []byte) {
	off := f.sent
	if n := len(f.kept); n > 0 {
		last := f.kept[n-1].buf
		k := min(cap(*last)-len(*last), len(p))
		*last = append(*last, p[:k]...)
		p, off = p[k:], off+uint64(k)
	}
	for len(p) > 0 {
		buf := inChunks.Get().(*[]byte)
		k := min(cap(*buf), len(p))
		*buf = append((*buf)[:0], p[:k]...)
		f.kept = append(f.kept, inChunk{off: off, buf: buf})
		p, off = p[k:], off+uint64(k)
	}
}

// usable says why input cannot go on: the stream ended or failed.
func (f *inputFeed) usable() error {
	if err := f.h.inputError(); err != nil {
		return err
	}
	if f.h.finished.Load() {
		return fmt.Errorf("client: stream %d has ended: %w", f.h.id, io.ErrClosedPipe)
	}
	return nil
}

// flush sends what did not go out on the current connection yet. A
// connection that fails keeps the rest for the next one.
func (f *inputFeed) flush() {
	f.sendMu.Lock()
	defer f.sendMu.Unlock()
	for {
		f.mu.Lock()
		cn, next := f.cn, f.next
		var p []byte
		for i := len(f.kept) - 1; i >= 0; i-- { // next is near the end
			c := f.kept[i]
			if end := c.off + uint64(len(*c.buf)); next >= c.off && next < end {
				p = (*c.buf)[next-c.off:]
				break
			}
			if next >= c.off {
				break
			}
		}
		if cn == nil || p == nil {
			f.mu.Unlock()
			return
		}
		// The chunk stays kept (and unrecycled) until written, which is
		// after this frame went out: the agent reports it then.
		f.frame = wire.AppendData(f.frame[:0], wire.Data{Type: wire.InAt, Stream: f.h.id, Channel: wire.ChanInput, Offset: next, Payload: p})
		f.mu.Unlock()
		if err := cn.write(websocket.MessageBinary, f.frame); err != nil {
			f.mu.Lock()
			if f.cn == cn {
				f.cn = nil // the reattach tells where to go on from
			}
			f.mu.Unlock()
			return
		}
		f.mu.Lock()
		if f.cn == cn {
			f.next = max(f.next, next+uint64(len(p)))
		}
		f.mu.Unlock()
	}
}

// progress applies an `input` event: what was written is let go of and
// the window opens.
func (f *inputFeed) progress(msg []byte) {
	var ev struct {
		Written uint64 `json:"written"`
	}
	if json.Unmarshal(msg, &ev) != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releaseLocked(ev.Written)
	f.notifyLocked()
}

func (f *inputFeed) releaseLocked(written uint64) {
	written = min(written, f.sent)
	if written <= f.written {
		return
	}
	f.written = written
	n := 0
	for _, c := range f.kept {
		if c.off+uint64(len(*c.buf)) > written {
			break
		}
		inChunks.Put(c.buf)
		n++
	}
	f.kept = f.kept[n:]
	if len(f.kept) > 0 {
		f.base = f.kept[0].off
	} else {
		f.base = f.sent
	}
}

// begin runs on the reader goroutine when the stream was created or
// attached: numbering goes on from what the agent received so far (0 for
// a new stream; more when another client fed it before).
func (f *inputFeed) begin(cn *conn, res json.RawMessage) {
	var r struct {
		Received *uint64 `json:"received"`
		Written  uint64  `json:"written"`
	}
	json.Unmarshal(res, &r)
	if r.Received == nil || !cn.inputOffsets {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.base, f.sent, f.next, f.written, f.cn = *r.Received, *r.Received, *r.Received, r.Written, cn
	f.numbering = true
}

// reattached runs on the reader goroutine when a reconnect attached the
// stream again on cn: input goes on from what the agent received.
func (f *inputFeed) reattached(cn *conn, res json.RawMessage) {
	var r struct {
		Received *uint64 `json:"received"`
		Written  uint64  `json:"written"`
	}
	json.Unmarshal(res, &r)
	f.mu.Lock()
	if r.Received == nil || !cn.inputOffsets {
		f.cn = nil
		f.mu.Unlock()
		return
	}
	f.releaseLocked(r.Written)
	f.cn, f.next = cn, max(*r.Received, f.base)
	f.notifyLocked()
	pending := f.next < f.sent
	f.mu.Unlock()
	if pending {
		go f.flush() // not on the reader goroutine: a write may wait for room
	}
}

// closeAt ends the input after everything handed over: the agent closes
// it once it received that much, and a retry after a reconnect is
// harmless.
func (f *inputFeed) closeAt(ctx context.Context) error {
	f.mu.Lock()
	off := f.sent
	f.mu.Unlock()
	for {
		_, err := f.h.c.call(ctx, "close_stdin", closeStdinParams{Stream: f.h.id, Offset: &off}, callOpts{once: true})
		if err == nil || !errors.Is(err, ErrConnectionLost) || ctx.Err() != nil {
			return err
		}
		if _, err := f.h.c.connection(ctx); err != nil {
			return err
		}
	}
}

type closeStdinParams struct {
	Stream uint64  `json:"stream"`
	Offset *uint64 `json:"offset,omitempty"`
}

// isInputGap reports an agent's refusal of a frame past what it received:
// the connection that carried it is closed and input goes on from the
// reattach, so it is not the stream's error.
func isInputGap(e *Error) bool { return strings.Contains(e.Message, "input would leave a gap") }

// isStaleInput says the agent refused an upload's input because it came
// on a connection that a newer one replaced as the upload's owner (it
// was sent before the client knew of the cut): the reattach on the newer
// one says what the agent received, and the rest is sent again there.
func isStaleInput(e *Error) bool {
	return strings.Contains(e.Message, "does not own the upload")
}
