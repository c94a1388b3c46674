package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// DefaultWindow is the unacknowledged data an attachment may have in flight
// per byte channel; event channels get DefaultWindow/256 events.
const DefaultWindow = 1 << 20

var (
	ErrUnknownChannel = errors.New("stream: unknown channel")
	ErrCursorAhead    = errors.New("stream: cursor beyond the end of the channel")
)

// ItemKind says what Attachment.Next produced.
type ItemKind uint8

const (
	ItemData  ItemKind = iota + 1 // bytes from a byte channel
	ItemEvent                     // one encoded event from an event channel
	ItemGap                       // positions the client needs that are gone
	ItemEnd                       // the last item of the attachment
)

// Item is one thing to send to the attached client, in order.
type Item struct {
	Kind    ItemKind
	Channel string
	// Offset is the absolute offset of Data's first byte (ItemData), or
	// the event's seq (ItemEvent).
	Offset uint64
	// Data is the payload appended to the caller's buffer (ItemData) or the
	// event's body as its producer encoded it (ItemEvent, shared and
	// read-only): each surface wraps it in its own envelope.
	Data []byte
	// From and To bound a gap in the protocol's units: byte offsets, or
	// event seqs (ItemGap).
	From, To uint64
	// End and Cursors describe the end (ItemEnd).
	End     End
	Cursors map[string]uint64

	ref *chunk // the log memory Data is in (NextParked), until Release
}

// Release lets go of the log memory an item from NextParked holds; call it
// once, when Data is no longer used. Other items need no release.
func (it Item) Release() {
	if it.ref != nil {
		it.ref.unref()
	}
}

// Attachment is one client's read position on a stream. It is used by one
// goroutine calling Next; Ack, Cut and Close may come from any goroutine.
type Attachment struct {
	s      *Stream
	next   []uint64 // per log: next position to send
	acked  []uint64 // per log: what this client acknowledged
	window int
	rr     int  // round-robin start, so one channel cannot starve another
	cut    *End // set by Cut or CutAfter: end this attachment early
	// cutAt, set by CutAfter, holds the log ends at the cut: the
	// attachment ends only once it has handed out everything below them.
	cutAt  []uint64
	closed bool
	ended  bool
	ho     handoff // a parked consumer's hook (handoff.go)
}

// Attach starts reading the stream from the given cursors (missing
// channels start at 0). window is the unacknowledged limit, 0 for none.
func (s *Stream) Attach(from map[string]uint64, window int) (*Attachment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := &Attachment{s: s, next: make([]uint64, len(s.logs)), acked: make([]uint64, len(s.logs)), window: window}
	for name, c := range from {
		i := s.logIndex(name)
		if i < 0 {
			return nil, fmt.Errorf("%w %q (stream %d has %s)", ErrUnknownChannel, name, s.ID, s.channelNames())
		}
		if c > s.logs[i].end {
			return nil, fmt.Errorf("%w: %s cursor %d, end %d", ErrCursorAhead, name, c, s.logs[i].end)
		}
		a.next[i], a.acked[i] = c, c
	}
	// Attaching from c says the client has everything below c; like an
	// ack, that can give a blocked writer room. Only once all are valid.
	for i, l := range s.logs {
		l.ackLocked(a.acked[i])
	}
	s.attached++
	s.atts = append(s.atts, a)
	s.releaseReadLocked()
	s.notifyLocked()
	return a, nil
}

func (s *Stream) logIndex(name string) int {
	for i, l := range s.logs {
		if l.name == name {
			return i
		}
	}
	return -1
}

func (s *Stream) channelNames() []string {
	names := make([]string, len(s.logs))
	for i, l := range s.logs {
		names[i] = l.name
	}
	return names
}

// Stream returns the attached stream.
func (a *Attachment) Stream() *Stream { return a.s }

// Next blocks until there is something to send and returns it. Data is
// appended to dst, at most maxChunk bytes. After the ItemEnd item it
// returns io.EOF; when ctx is done it returns ctx's error. (NextParked,
// in handoff.go, is the variant without the copy.)
func (a *Attachment) Next(ctx context.Context, dst []byte, maxChunk int) (Item, error) {
	s := a.s
	for {
		s.mu.Lock()
		item, ok := a.nextLocked(dst, maxChunk, false)
		ch := s.changed
		s.mu.Unlock()
		if ok {
			return item, nil
		}
		if a.ended {
			return Item{}, io.EOF
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return Item{}, ctx.Err()
		}
	}
}

func (a *Attachment) nextLocked(dst []byte, maxChunk int, shared bool) (Item, bool) {
	s := a.s
	if a.ended {
		return Item{}, false
	}
	if a.cut != nil && a.reachedCutLocked() {
		a.ended = true
		return Item{Kind: ItemEnd, End: *a.cut, Cursors: s.cursorsLocked(a.next)}, true
	}
	n := len(s.logs)
	for k := 0; k < n; k++ {
		i := (a.rr + k) % n
		l := s.logs[i]
		c := a.next[i]
		if a.cutAt != nil && c >= a.cutAt[i] {
			continue // this channel has delivered all the cut owes
		}
		if c < l.start {
			a.next[i] = l.start
			// Gapped positions are never sent, so they must not count
			// as in flight against the window.
			a.acked[i] = max(a.acked[i], l.start)
			a.rr = (i + 1) % n
			from, to := c, l.start
			if l.unit == Events {
				from, to = from+1, to+1
			}
			return Item{Kind: ItemGap, Channel: l.name, From: from, To: to}, true
		}
		if c >= l.end {
			continue
		}
		room := a.room(i)
		if room == 0 {
			continue
		}
		a.rr = (i + 1) % n
		if l.unit == Events {
			a.next[i]++
			return Item{Kind: ItemEvent, Channel: l.name, Offset: c + 1, Data: l.eventLocked(c)}, true
		}
		size := min(uint64(room), l.end-c, uint64(maxChunk))
		if a.cutAt != nil {
			size = min(size, a.cutAt[i]-c)
		}
		if shared {
			ch, data := l.data.slice(c, int(size))
			ch.refs.Add(1)
			a.next[i] += uint64(len(data))
			return Item{Kind: ItemData, Channel: l.name, Offset: c, Data: data, ref: ch}, true
		}
		off := len(dst)
		dst = slices.Grow(dst, int(size))[:off+int(size)]
		l.readBytesLocked(dst[off:], c)
		a.next[i] += size
		return Item{Kind: ItemData, Channel: l.name, Offset: c, Data: dst[off:]}, true
	}
	if s.end != nil {
		for i, l := range s.logs {
			if a.next[i] < l.end {
				return Item{}, false // waiting for window room
			}
		}
		a.ended = true
		return Item{Kind: ItemEnd, End: *s.end, Cursors: s.cursorsLocked(a.next)}, true
	}
	return Item{}, false
}

// room is how much log i may send before the client must acknowledge.
func (a *Attachment) room(i int) int {
	if a.window <= 0 {
		return int(^uint(0) >> 1)
	}
	limit := a.window
	if a.s.logs[i].unit == Events {
		limit = max(a.window/256, 1)
	}
	inflight := int(a.next[i] - a.acked[i])
	return max(limit-inflight, 0)
}

// Ack records the client's consumed cursors: it opens the window and lets
// Block logs release retained data. Cursors only move forward.
func (a *Attachment) Ack(cursors map[string]uint64) error {
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	// Every cursor is checked before any is applied: a refused ack
	// changes nothing.
	for name, c := range cursors {
		i := s.logIndex(name)
		if i < 0 {
			return fmt.Errorf("%w %q", ErrUnknownChannel, name)
		}
		if c > a.next[i] {
			return fmt.Errorf("%w: ack of %s at %d, only %d sent", ErrCursorAhead, name, c, a.next[i])
		}
	}
	for name, c := range cursors {
		if i := s.logIndex(name); c > a.acked[i] {
			a.acked[i] = c
			s.logs[i].ackLocked(c)
		}
	}
	s.releaseReadLocked()
	if s.budget.short() {
		// Writers elsewhere wait for memory: what was just acknowledged
		// need not wait for this stream's own writer to let it go.
		s.trimAckedLocked()
	}
	s.notifyLocked()
	return nil
}

// Acknowledge records cursors a client consumed of a stream it is no
// longer attached to (the end came before its last ack): it lets the
// stream's buffers go sooner. Cursors beyond a channel's end, or of
// channels the stream does not have, are refused and change nothing.
func (s *Stream) Acknowledge(cursors map[string]uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, c := range cursors {
		i := s.logIndex(name)
		if i < 0 {
			return fmt.Errorf("%w %q", ErrUnknownChannel, name)
		}
		if c > s.logs[i].end {
			return fmt.Errorf("%w: ack of %s at %d, end %d", ErrCursorAhead, name, c, s.logs[i].end)
		}
	}
	for name, c := range cursors {
		s.logs[s.logIndex(name)].ackLocked(c)
	}
	s.releaseReadLocked()
	s.notifyLocked()
	return nil
}

// Cut makes the attachment end early: its next item is an ItemEnd with e
// and the cursors sent so far. Used for detach and for resume.
func (a *Attachment) Cut(e End) {
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.cut == nil && !a.ended {
		a.cut = &e
		s.notifyLocked()
	}
}

// CutAfter is Cut for a client that cannot reattach from cursors: the
// attachment first hands out everything its logs hold now (what was
// written before the cut), then ends with e. Output written later is left
// for other attachments. A Cut that came first wins, and a stream that has
// already ended keeps its own end: everything before it is in the logs.
func (a *Attachment) CutAfter(e End) {
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.cut == nil && !a.ended && s.end == nil {
		a.cut = &e
		a.cutAt = make([]uint64, len(s.logs))
		for i, l := range s.logs {
			a.cutAt[i] = l.end
		}
		s.notifyLocked()
	}
}

// reachedCutLocked reports whether a cut may end the attachment now.
func (a *Attachment) reachedCutLocked() bool {
	for i, at := range a.cutAt {
		if a.next[i] < at {
			return false
		}
	}
	return true
}

// Sent returns the cursors of what has been handed out by Next.
func (a *Attachment) Sent() map[string]uint64 {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	return a.s.cursorsLocked(a.next)
}

// Close releases the attachment. From the last Close on, the stream's grace
// period runs. Closing twice is harmless.
func (a *Attachment) Close() {
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.closed {
		return
	}
	a.closed = true
	a.kickLocked()
	s.attached--
	if i := slices.Index(s.atts, a); i >= 0 {
		s.atts = slices.Delete(s.atts, i, i+1)
	}
	if s.attached == 0 {
		s.lastDetach = time.Now()
	}
	s.releaseReadLocked()
	s.notifyLocked()
}
