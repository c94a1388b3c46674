package stream

import (
	"context"
	"io"
)

// A consumer that waits for output only to pass each piece on (an
// endpoint's pump, writing it to a connection) costs a wake-up per piece:
// the producer's append (or the stream's end) wakes it, and on the
// project's VM waking a goroutine also wakes a thread on the other vCPU.
// A keystroke's echo took three such wake-ups (the pty's reader, the
// pump, the connection's writer). So a consumer may park with a hook
// instead: the next producer that appends (bytes or an event), or
// finishes the stream, calls the hook on its own goroutine, after the
// stream's lock is released, and the hook may take the items and pass
// them on itself (TakeParked); anything else that changes (an ack, a cut,
// a close) wakes the consumer as before. One party at a time holds the
// attachment's claim, from taking an item until it has passed it on, so
// items keep their order whoever sends them.
type handoff struct {
	parked  bool          // the consumer waits in NextParked
	armed   bool          // the next append or end calls fn
	claimed bool          // an item was taken and is not passed on yet
	waits   bool          // the parked consumer waits for the claim's end
	fn      func()        // the parked consumer's hook
	kick    chan struct{} // closed to wake the parked consumer
}

// NextParked is Next without the copy, for a consumer that lets
// producers deliver for it while it waits (see handoff; a nil hook lets
// them only wake it). Data of a data item is the log's own memory (at
// most the rest of one of its chunks), read-only, valid until the item is
// Released, which the caller must do once. The item is also claimed: call
// Unclaim once it is passed on (queued in order). While a hook holds the
// claim, NextParked waits for it.
func (a *Attachment) NextParked(ctx context.Context, maxChunk int, hook func()) (Item, error) {
	s := a.s
	for {
		s.mu.Lock()
		if !a.ho.claimed {
			item, ok := a.nextLocked(nil, maxChunk, true)
			if ok {
				a.ho.claimed = true
				a.unparkLocked()
				s.mu.Unlock()
				return item, nil
			}
			if a.ended || a.closed {
				s.mu.Unlock()
				return Item{}, io.EOF
			}
		}
		a.ho.parked, a.ho.fn = true, hook
		a.ho.armed, a.ho.waits = !a.ho.claimed && hook != nil, a.ho.claimed
		if a.ho.kick == nil {
			a.ho.kick = make(chan struct{})
		}
		kick := a.ho.kick
		s.mu.Unlock()
		select {
		case <-kick:
		case <-ctx.Done():
			s.mu.Lock()
			a.unparkLocked()
			s.mu.Unlock()
			return Item{}, ctx.Err()
		}
	}
}

// TakeParked is what a hook calls: the next item, claimed, if the
// consumer is still parked and nobody holds the claim; call Unclaim once
// it is passed on. false when there is nothing to send (the hook is
// armed again for the next append), when the consumer is awake or the
// claim is held (whoever holds it looks again before it waits), or when
// more than limit bytes wait to be sent: a backlog is the consumer's to
// send (it is woken), in large pieces, while the producer goes on.
func (a *Attachment) TakeParked(maxChunk, limit int) (Item, bool) {
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !a.ho.parked || a.ho.claimed || a.closed {
		return Item{}, false
	}
	if a.backlogLocked() > uint64(limit) {
		a.kickLocked()
		return Item{}, false
	}
	item, ok := a.nextLocked(nil, maxChunk, true)
	if !ok {
		a.ho.armed = true
		return Item{}, false
	}
	a.ho.claimed, a.ho.armed = true, false
	return item, true
}

// backlogLocked is how many bytes of the byte logs are not sent yet.
func (a *Attachment) backlogLocked() uint64 {
	var n uint64
	for i, l := range a.s.logs {
		if l.unit != Events && l.end > a.next[i] {
			n += l.end - a.next[i]
		}
	}
	return n
}

// Unclaim ends the claim of the item NextParked or TakeParked returned.
// A consumer that waits for it is woken.
func (a *Attachment) Unclaim() {
	s := a.s
	s.mu.Lock()
	a.ho.claimed = false
	if a.ho.waits {
		a.kickLocked()
	}
	s.mu.Unlock()
}

// Wake wakes the parked consumer, for a hook that leaves the sending to
// it (the connection is busy).
func (a *Attachment) Wake() {
	a.s.mu.Lock()
	a.kickLocked()
	a.s.mu.Unlock()
}

func (a *Attachment) kickLocked() {
	if a.ho.kick != nil {
		close(a.ho.kick)
	}
	a.unparkLocked()
}

func (a *Attachment) unparkLocked() {
	a.ho.parked, a.ho.armed, a.ho.waits, a.ho.fn, a.ho.kick = false, false, false, nil, nil
}

// hooksLocked is notifyLocked for an append or the stream's end (Finish):
// the hooks of armed consumers are returned, to be called once the lock
// is released, instead of waking them; every other waiter is woken.
func (s *Stream) hooksLocked(hooks []func()) []func() {
	close(s.changed)
	s.changed = make(chan struct{})
	for _, a := range s.atts {
		switch {
		case a.ho.armed:
			a.ho.armed = false
			hooks = append(hooks, a.ho.fn)
		case a.ho.parked && !a.ho.claimed:
			a.kickLocked()
		}
	}
	return hooks
}

// kickParkedLocked wakes every parked consumer; any change but an append
// of data does.
func (s *Stream) kickParkedLocked() {
	for _, a := range s.atts {
		if a.ho.parked {
			a.kickLocked()
		}
	}
}
