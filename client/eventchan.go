package client

import (
	"context"
	"errors"
	"sync"
)

// eventChan is the event channel of a handle (watch events, cell outputs,
// raw Jupyter messages): whole events, each the raw JSON of its frame, in
// seq order, with announced gaps in between. The reader goroutine pushes;
// consumers take events with next.
type eventChan struct {
	h        *handle
	name     string
	ackEvery uint64
	limit    int // most events one attachment's window lets the agent have buffered; 0: none

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every push, gap or finish
	queue    [][]byte
	received uint64 // seq of the last event received (0: none)
	base     uint64 // received when the current attachment began
	consumed uint64 // seq of the last event the application took
	ackReq   uint64
	gaps     []gapMark // seq ranges [from, to)
	err      error
}

func newEventChan(h *handle, name string, from uint64, window int) *eventChan {
	e := &eventChan{h: h, name: name, received: from, base: from, consumed: from, ackReq: from, changed: make(chan struct{})}
	events := defaultWindow / 256
	if window > 0 {
		events = max(window/256, 1)
		e.limit = events + 1 // as byteChan: one event of slack
	}
	e.ackEvery = uint64(max(events/2, 1))
	return e
}

func (e *eventChan) notifyLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// push appends the event with the given seq; raw must not be reused.
func (e *eventChan) push(seq uint64, raw []byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if seq != e.received+1 {
		return protocolErrorf("stream %d %s: event seq %d, expected %d", e.h.id, e.name, seq, e.received+1)
	}
	if n := len(e.queue) + 1 - e.oldLocked(); e.limit > 0 && n > e.limit {
		return protocolErrorf("stream %d %s: %d events unacknowledged, beyond the window", e.h.id, e.name, n)
	}
	e.queue = append(e.queue, raw)
	e.received = seq
	e.notifyLocked()
	return nil
}

// reattached follows byteChan.reattached.
func (e *eventChan) reattached() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.base = e.received
}

// oldLocked is how many queued events arrived before the current
// attachment: seqs consumed+1 to base, less gaps.
func (e *eventChan) oldLocked() int { return heldBetween(e.consumed+1, e.base+1, e.gaps) }

// gap records that seqs [from, to) are gone.
func (e *eventChan) gap(from, to uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if from != e.received+1 || to <= from {
		return protocolErrorf("stream %d %s: gap [%d, %d) after seq %d", e.h.id, e.name, from, to, e.received)
	}
	e.gaps = append(e.gaps, gapMark{from, to})
	e.received = to - 1
	e.notifyLocked()
	return nil
}

func (e *eventChan) finish(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err == nil {
		e.err = err
		e.notifyLocked()
	}
}

// next returns the next event's raw JSON, blocking until there is one. At
// an announced gap it returns a *GapError once. After the last event it
// returns the channel's final error (io.EOF for a normal end).
func (e *eventChan) next(ctx context.Context) ([]byte, error) {
	for {
		e.mu.Lock()
		if len(e.gaps) > 0 && e.gaps[0].from == e.consumed+1 {
			g := e.gaps[0]
			e.gaps = e.gaps[1:]
			e.consumed = g.to - 1
			e.requestAckLocked()
			e.mu.Unlock()
			return nil, &GapError{Stream: e.h.id, Channel: e.name, From: g.from, To: g.to}
		}
		if len(e.queue) > 0 {
			ev := e.queue[0]
			e.queue[0] = nil
			e.queue = e.queue[1:]
			e.consumed++
			e.requestAckLocked()
			e.mu.Unlock()
			return ev, nil
		}
		err, ch := e.err, e.changed
		e.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// requestAckLocked follows byteChan.requestAckLocked.
func (e *eventChan) requestAckLocked() {
	switch {
	case e.consumed-e.ackReq >= e.ackEvery:
		e.ackReq = e.consumed
		e.h.requestAck(false)
	case len(e.queue) == 0 && e.consumed > e.ackReq:
		e.h.requestAck(true)
	}
}

func (e *eventChan) cursors() (received, consumed uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.received, e.consumed
}

// eventFeed delivers a handle's events on a channel, for applications
// that range over them instead of calling Next. Gaps are skipped (the
// handle's Gaps lists them). Its goroutine is started by the first call
// of start and stops after the last event, or when the client closes;
// done is closed then.
type eventFeed[T any] struct {
	mu   sync.Mutex
	ch   chan T
	done chan struct{}
}

func (f *eventFeed[T]) start(c *Client, next func(context.Context) (T, error)) <-chan T {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ch != nil {
		return f.ch
	}
	f.ch, f.done = make(chan T), make(chan struct{})
	ch, done := f.ch, f.done
	go func() {
		defer close(done)
		defer close(ch)
		for {
			v, err := next(c.life)
			var gap *GapError
			switch {
			case errors.As(err, &gap):
				continue
			case err != nil:
				return
			}
			select {
			case ch <- v:
			case <-c.stop:
				return
			}
		}
	}()
	return ch
}

// running returns the feed's done channel, or nil if it was never
// started.
func (f *eventFeed[T]) running() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done
}
