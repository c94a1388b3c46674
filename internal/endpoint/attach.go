package endpoint

import (
	"errors"
	"sync"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// maxChunk is the largest payload of one data frame the agent sends: big
// enough for throughput, small enough that a default 1 MiB window keeps
// several frames in flight while acks come back.
const maxChunk = 256 << 10

// smallFrame is the largest payload copied, with its header, into a
// message of its own (one websocket frame, one write: a keystroke's echo).
// A larger payload is written straight from the log's memory, as a header
// fragment and a payload fragment of one message: no copy, and no frame
// buffers held for it.
const smallFrame = 16 << 10

// frameBufs recycles the buffers of small data frames.
var frameBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, wire.MaxDataHeader+smallFrame)
	return &b
}}

// attachment is a stream attached to this session, with the goroutine that
// pumps it.
type attachment struct {
	st  *stream.Stream
	att *stream.Attachment
}

// reserve claims an attachment slot for a stream an op is about to
// create, so that the op fails before it starts anything rather than
// after. The slot is used by attach(..., true) or given back by unreserve.
func (ss *Session) reserve() error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if err := ss.canAttachLocked(); err != nil {
		return err
	}
	ss.reserved++
	return nil
}

func (ss *Session) unreserve() {
	ss.mu.Lock()
	ss.reserved--
	ss.mu.Unlock()
}

// errClosing: the session takes no new attachment, since a resume is
// cutting it or it is gone.
var errClosing = wire.Errorf(wire.CodeUnavailable, "the connection is closing: reconnect and attach again")

// canAttachLocked says why the session takes no new attachment, if so.
func (ss *Session) canAttachLocked() error {
	if ss.cutting || ss.closed {
		return errClosing
	}
	if len(ss.atts)+ss.reserved >= maxAttachments {
		return wire.Errorf(wire.CodeLimit, "more than %d attachments on this connection", maxAttachments)
	}
	return nil
}

// attach attaches the session to st and returns a function that starts
// delivery; call it after the response announcing the stream is queued.
// reserved says the caller holds a slot from reserve, which this uses up.
func (ss *Session) attach(st *stream.Stream, from map[string]uint64, window int, reserved bool) (func(), error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if reserved {
		ss.reserved--
	}
	if err := ss.canAttachLocked(); err != nil {
		return nil, err
	}
	if _, ok := ss.atts[st.ID]; ok {
		return nil, wire.Errorf(wire.CodeConflict, "stream %d is already attached on this connection", st.ID)
	}
	att, err := st.Attach(from, window)
	if err != nil {
		if errors.Is(err, stream.ErrUnknownChannel) || errors.Is(err, stream.ErrCursorAhead) {
			return nil, wire.Errorf(wire.CodeBadRequest, "%v", err)
		}
		return nil, err
	}
	a := &attachment{st: st, att: att}
	ss.atts[st.ID] = a
	ss.pumps.Add(1)
	return func() { go ss.pump(a) }, nil
}

// attached returns this session's attachment to a stream, or nil.
func (ss *Session) attached(id uint64) *attachment {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.atts[id]
}

// pumpAhead is how many of an attachment's frames may wait for the
// connection's writer: one being written and one ready. The pump asks the
// log for more only then, so what a fast producer wrote meanwhile goes out
// in one large frame rather than in many small ones, each with its own
// wake-ups, headers and write; an idle connection still gets each piece
// of output at once.
const pumpAhead = 2

// directLimit is the most output deliver sends itself: a keystroke's
// echo, a prompt, a line or a few. A producer's bulk reads are larger
// (stream.minRead, 16 KiB), so bulk output goes through the pump and
// the writer, in frames as large as the writer's pace gathers.
const directLimit = 2 << 10

// pump delivers one attachment until its end item or the session's end.
// While it waits, whoever appends output may send it instead (deliver).
func (ss *Session) pump(a *attachment) {
	defer ss.pumps.Done()
	defer ss.release(a)
	ahead := make(chan struct{}, pumpAhead)
	written := func() { <-ahead }
	hook := func() { ss.deliver(a) }
	for {
		select {
		case ahead <- struct{}{}:
		case <-ss.ctx.Done():
			return
		}
		item, err := a.att.NextParked(ss.ctx, maxChunk, hook)
		if err != nil {
			return
		}
		f := ss.frame(a, item, written)
		ok := ss.sendData(f)
		a.att.Unclaim()
		if !ok || item.Kind == stream.ItemEnd {
			return
		}
	}
}

// deliver is a parked pump's hook (stream/handoff.go), run by the
// goroutine that appended output: while the connection is idle it writes
// the attachment's items itself, as sendControl writes a control frame,
// which spares a keystroke's echo the pump's and the writer's wake-ups.
// When the connection is busy, its socket's buffer has little room
// (sendroom.go: the producer must not wait for this client), or a backlog
// is waiting, it wakes the pump instead, whose frames queue for the
// writer: the writer's pace is what gathers output into large frames.
func (ss *Session) deliver(a *attachment) {
	for {
		if !ss.out.writing.TryLock() {
			a.att.Wake()
			return
		}
		if ss.out.pending.Load() > 0 || !socketRoom(ss.sock) {
			ss.out.writing.Unlock()
			a.att.Wake()
			return
		}
		item, ok := a.att.TakeParked(maxChunk, directLimit)
		if !ok {
			ss.out.writing.Unlock()
			return
		}
		f := ss.frame(a, item, nil)
		ok = ss.write(f)
		ss.out.writing.Unlock()
		a.att.Unclaim()
		if !ok || item.Kind == stream.ItemEnd {
			a.att.Wake() // the pump finds the end, or the session's
			return
		}
	}
}

// frame turns an item into its frame; written, if not nil, runs once the
// frame is written or dropped. An end item also unregisters the
// attachment: a client that attaches again as soon as it has the end
// must not find the old attachment still registered.
func (ss *Session) frame(a *attachment, item stream.Item, written func()) outFrame {
	f := outFrame{release: written}
	switch item.Kind {
	case stream.ItemData:
		if len(item.Data) <= smallFrame {
			bp := frameBufs.Get().(*[]byte)
			f.binary, f.msg = true, append(appendOutHeader((*bp)[:0], a.st.ID, item), item.Data...)
			item.Release()
			f.release = func() {
				frameBufs.Put(bp)
				if written != nil {
					written()
				}
			}
		} else {
			hdr := appendOutHeader(make([]byte, 0, wire.MaxDataHeader), a.st.ID, item)
			f.binary, f.msg, f.payload = true, hdr, item.Data
			f.release = func() {
				item.Release()
				if written != nil {
					written()
				}
			}
		}
	case stream.ItemEvent:
		bp := frameBufs.Get().(*[]byte)
		msg, ok := appendEvent((*bp)[:0], a.st, item)
		if !ok {
			// A producer's body the protocol cannot carry: the client
			// learns of the hole as of any dropped event.
			frameBufs.Put(bp)
			msg, _ = jsonBytes(map[string]any{"event": "gap", "stream": a.st.ID, "channel": item.Channel, "from": item.Offset, "to": item.Offset + 1})
			f.msg = msg
			break
		}
		f.msg = msg
		f.release = func() {
			if cap(msg) <= cap(*bp) { // not grown past the pool's size
				*bp = msg[:0]
				frameBufs.Put(bp)
			}
			if written != nil {
				written()
			}
		}
	case stream.ItemGap:
		f.msg, _ = jsonBytes(map[string]any{"event": "gap", "stream": a.st.ID, "channel": item.Channel, "from": item.From, "to": item.To})
	case stream.ItemEnd:
		f.msg = endEvent(a.st.ID, item.End, item.Cursors)
		ss.release(a)
	}
	return f
}

// release unregisters the attachment and closes it; it may run twice.
func (ss *Session) release(a *attachment) {
	ss.mu.Lock()
	if ss.atts[a.st.ID] == a {
		delete(ss.atts, a.st.ID)
	}
	ss.mu.Unlock()
	a.att.Close()
}

// appendOutHeader appends the OUT header of a data item.
func appendOutHeader(dst []byte, id uint64, item stream.Item) []byte {
	ch, _ := wire.ChannelNumber(item.Channel)
	return wire.AppendOutHeader(dst, id, ch, item.Offset)
}

func endEvent(id uint64, e stream.End, cursors map[string]uint64) []byte {
	m := e.Fields()
	m["event"], m["stream"], m["cursors"] = "end", id, cursors
	b, _ := jsonBytes(m)
	return b
}

// cut ends every attachment of the session with e; each pump sends its end
// after the data it already queued.
func (ss *Session) cut(e stream.End) {
	ss.mu.Lock()
	atts := make([]*attachment, 0, len(ss.atts))
	for _, a := range ss.atts {
		atts = append(atts, a)
	}
	ss.mu.Unlock()
	for _, a := range atts {
		a.att.Cut(e)
	}
}
