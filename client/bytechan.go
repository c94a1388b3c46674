package client

import (
	"errors"
	"io"
	"sync"
)

// minRing is a byte channel's first allocation: small outputs stay small.
const minRing = 4 << 10

// gapMark is an announced gap: positions [from, to) are gone.
type gapMark struct{ from, to uint64 }

// heldBetween counts the positions in [lo, hi) that are not in a gap: what
// a channel holds there. gaps are the gaps not consumed yet, so none lies
// below lo.
func heldBetween(lo, hi uint64, gaps []gapMark) int {
	if lo >= hi {
		return 0
	}
	n := hi - lo
	for _, g := range gaps {
		if g.to <= hi {
			n -= g.to - g.from
		}
	}
	return int(n)
}

// byteChan is one byte channel of a handle (stdout, stderr or pty): bytes
// received from the agent that the application has not consumed yet, in
// offset order, with announced gaps in between.
//
// One producer, the connection's reader goroutine, appends whole frames:
// it reads the socket straight into the ring's free space without holding
// mu (no one else touches free space) and publishes the bytes under mu,
// so a reader of already received bytes never waits for the network.
// Consumers (Read, WriteTo, a callback pump) take bytes under mu; one
// consumer at a time.
type byteChan struct {
	h        *handle
	name     string
	ackEvery uint64 // consumed bytes that trigger an immediate ack
	limit    int    // most bytes one attachment's window lets the agent have buffered here; 0: none

	mu       sync.Mutex
	cond     sync.Cond
	buf      []byte // ring
	head     int    // index of the oldest unconsumed byte
	size     int    // published, unconsumed bytes
	received uint64 // offset of the next byte expected from the agent
	base     uint64 // received when the current attachment began
	consumed uint64 // offset of the next byte the application gets
	ackReq   uint64 // consumed at the last ack request
	gaps     []gapMark
	err      error // returned once the buffered bytes are consumed
	owned    bool  // a callback consumes this channel
	// receiving says the reader goroutine is between the two locked
	// parts of receive, writing into free room of buf: buf stays then.
	receiving bool
}

func newByteChan(h *handle, name string, from uint64, window int) *byteChan {
	b := &byteChan{h: h, name: name, received: from, base: from, consumed: from, ackReq: from}
	b.cond.L = &b.mu
	b.ackEvery = defaultWindow / 2
	if window > 0 {
		b.ackEvery = uint64(max(window/2, 1))
		// Bytes of earlier attachments do not count (see oldLocked); a
		// frame of slack keeps this a guard, not a second flow control.
		b.limit = window + maxPayload
	}
	return b
}

// receive appends one data frame: prefix is the payload read with the
// header, r the rest of the message. Only the reader goroutine calls it.
// On error the caller drains r.
func (b *byteChan) receive(off uint64, prefix []byte, r io.Reader) error {
	b.mu.Lock()
	if off != b.received {
		b.mu.Unlock()
		return protocolErrorf("stream %d %s: data at offset %d, expected %d", b.h.id, b.name, off, b.received)
	}
	b.receiving = true
	b.mu.Unlock()
	pend, err := b.fill(prefix, r)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.receiving = false
	if err != nil {
		return err
	}
	if n := b.size + pend - b.oldLocked(); b.limit > 0 && n > b.limit {
		return protocolErrorf("stream %d %s: %d bytes unacknowledged, beyond the window", b.h.id, b.name, n)
	}
	b.size += pend
	b.received += uint64(pend)
	b.cond.Broadcast()
	return nil
}

// fill writes a frame's payload (prefix, then r to its end) into the free
// room after the published bytes, without publishing it, and returns how
// much it wrote.
func (b *byteChan) fill(prefix []byte, r io.Reader) (int, error) {
	pend := 0
	for len(prefix) > 0 {
		n := copy(b.reserve(pend), prefix)
		prefix, pend = prefix[n:], pend+n
	}
	for {
		n, err := r.Read(b.reserve(pend))
		pend += n
		if err == io.EOF {
			return pend, nil
		}
		if err != nil {
			return pend, err
		}
	}
}

// reattached starts a new attachment's window count at what was received:
// attaching from there acknowledges it, so each reattach lets the agent
// send a window more while older bytes may still wait unread.
func (b *byteChan) reattached() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.base = b.received
}

// oldLocked is how many buffered bytes arrived before the current
// attachment: the offsets below base not consumed yet, less gaps.
func (b *byteChan) oldLocked() int { return heldBetween(b.consumed, b.base, b.gaps) }

// reserve returns free room after the published bytes and the pend bytes
// written but not yet published, growing the ring when it is full.
func (b *byteChan) reserve(pend int) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	used := b.size + pend
	if used == len(b.buf) {
		b.growLocked(used, used+1)
	}
	tail := (b.head + used) % len(b.buf)
	if tail < b.head {
		return b.buf[tail:b.head]
	}
	return b.buf[tail:]
}

// growLocked reallocates the ring with room for need bytes, keeping the
// used bytes (published and pending) in order.
func (b *byteChan) growLocked(used, need int) {
	n := max(len(b.buf)*2, minRing)
	for n < need {
		n *= 2
	}
	nb := make([]byte, n)
	if len(b.buf) > 0 {
		k := copy(nb[:used], b.buf[b.head:])
		copy(nb[k:used], b.buf)
	}
	b.buf, b.head = nb, 0
}

// gap records that [from, to) is gone; the data that follows starts at to.
func (b *byteChan) gap(from, to uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if from != b.received || to <= from {
		return protocolErrorf("stream %d %s: gap [%d, %d) at offset %d", b.h.id, b.name, from, to, b.received)
	}
	b.gaps = append(b.gaps, gapMark{from, to})
	b.received = to
	b.cond.Broadcast()
	return nil
}

// finish makes consumers get err (io.EOF for a normal end) once the
// buffered bytes are consumed. Only the first call counts.
func (b *byteChan) finish(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = err
	}
	b.cond.Broadcast()
}

// nextLocked returns the next contiguous buffered bytes, or the gap the
// consumer has reached, or the final error; all nil means wait.
func (b *byteChan) nextLocked() ([]byte, *GapError, error) {
	if len(b.gaps) > 0 && b.gaps[0].from == b.consumed {
		g := b.gaps[0]
		b.gaps = b.gaps[1:]
		b.consumed = g.to
		b.requestAckLocked()
		return nil, &GapError{Stream: b.h.id, Channel: b.name, From: g.from, To: g.to}, nil
	}
	if b.size > 0 {
		seg := b.buf[b.head:min(b.head+b.size, len(b.buf))]
		if len(b.gaps) > 0 {
			if lim := b.gaps[0].from - b.consumed; uint64(len(seg)) > lim {
				seg = seg[:lim]
			}
		}
		return seg, nil, nil
	}
	if b.err != nil && !b.receiving {
		// Consumed to the end: the ring (up to a window, a megabyte by
		// default) goes now, not with the handle, which an application
		// may keep long after.
		b.buf, b.head = nil, 0
	}
	return nil, nil, b.err
}

// advanceLocked consumes n bytes returned by nextLocked.
func (b *byteChan) advanceLocked(n int) {
	if n == 0 {
		return
	}
	b.head = (b.head + n) % len(b.buf)
	b.size -= n
	b.consumed += uint64(n)
	b.requestAckLocked()
}

// requestAckLocked asks for an ack at once when half a window has been
// consumed since the last one (the agent then still has half a window to
// send), and lazily when the buffer runs empty: a retention buffer smaller
// than the window needs that ack to go on, but a fast stream must not pay
// an ack per frame for it.
func (b *byteChan) requestAckLocked() {
	switch {
	case b.consumed-b.ackReq >= b.ackEvery:
		b.ackReq = b.consumed
		b.h.requestAck(false)
	case b.size == 0 && b.consumed > b.ackReq:
		b.h.requestAck(true)
	}
}

// Read implements io.Reader. At an announced gap it returns 0 and a
// *GapError once; the next Read continues after the gap.
func (b *byteChan) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.owned {
		return 0, ErrCallbackOwnsOutput
	}
	for {
		seg, gap, err := b.nextLocked()
		switch {
		case gap != nil:
			return 0, gap
		case seg != nil:
			n := copy(p, seg)
			b.advanceLocked(n)
			return n, nil
		case err != nil:
			return 0, err
		case len(p) == 0:
			return 0, nil
		}
		b.cond.Wait()
	}
}

// WriteTo implements io.WriterTo: io.Copy then writes straight from the
// ring, without an intermediate copy.
func (b *byteChan) WriteTo(w io.Writer) (int64, error) {
	var total int64
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.owned {
		return 0, ErrCallbackOwnsOutput
	}
	for {
		seg, gap, err := b.nextLocked()
		switch {
		case gap != nil:
			return total, gap
		case seg == nil && err == io.EOF:
			return total, nil
		case seg == nil && err != nil:
			return total, err
		case seg == nil:
			b.cond.Wait()
			continue
		}
		b.mu.Unlock()
		n, werr := w.Write(seg)
		b.mu.Lock()
		b.advanceLocked(n)
		total += int64(n)
		if werr != nil {
			return total, werr
		}
	}
}

// pump hands the channel's bytes to fn until the channel ends, or until
// the client closes (what is still buffered then is not handed over). A
// gap is skipped (it is recorded in the handle's Gaps). The slice passed
// to fn is only valid during the call.
func (b *byteChan) pump(fn func([]byte)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		if errors.Is(b.err, ErrClosed) {
			return
		}
		seg, gap, err := b.nextLocked()
		switch {
		case gap != nil:
			continue
		case seg == nil && err != nil:
			return
		case seg == nil:
			b.cond.Wait()
			continue
		}
		b.mu.Unlock()
		fn(seg)
		b.mu.Lock()
		b.advanceLocked(len(seg))
	}
}

// cursors returns the received and consumed offsets.
func (b *byteChan) cursors() (received, consumed uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.received, b.consumed
}

// buffered returns how many received bytes wait to be consumed.
func (b *byteChan) buffered() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.size
}
