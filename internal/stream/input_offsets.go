package stream

import (
	"context"
	"fmt"
	"math"
)

// Input offsets: a client that numbers its input (IN frames with their
// offset, protocol section 5) gets every byte written exactly once and in
// order, across reconnects and resumes, whichever connection brings it:
// what the Input already received is dropped, input past it is refused
// (bytes in between were lost on the way), and an end of input waits for
// the input before it. The client keeps what it sent until the Input
// reports it written, and sends again from the received cursor after a
// reattach.

// WriteAt accepts p, which starts at offset off of the input.
func (in *Input) WriteAt(off uint64, p []byte) error {
	in.mu.Lock()
	defer in.unlock()
	if off > in.received {
		return fmt.Errorf("%w: a frame at offset %d, but only %d bytes were received: nothing written", ErrInputGap, off, in.received)
	}
	skip := in.received - off
	if skip >= uint64(len(p)) {
		return nil // all of it was received already (sent again after a reconnect)
	}
	p = p[skip:]
	var past int
	if in.closeAt >= 0 {
		// The end of input was declared: what lies beyond it is not
		// the input's.
		if room := uint64(in.closeAt) - in.received; uint64(len(p)) > room {
			p, past = p[:room], len(p)-int(room)
		}
	}
	if len(p) > 0 {
		if err := in.writeLocked(p); err != nil {
			return err
		}
	}
	if in.closeAt >= 0 && in.received >= uint64(in.closeAt) {
		in.closeLocked()
	}
	if past > 0 {
		return fmt.Errorf("%w: %d bytes past the end of input declared at %d were dropped", ErrInputClosed, past, in.closeAt)
	}
	return nil
}

// CloseAt ends the input once off bytes were received: an end of input
// sent after the input before it never overtakes it. Again at the same
// offset it is a no-op (a client that resends it after a reconnect).
func (in *Input) CloseAt(off uint64) error {
	if off > math.MaxInt64 {
		return fmt.Errorf("%w: end of input at %d is beyond any input", ErrInputEOF, off)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	switch {
	case off < in.received:
		return fmt.Errorf("%w: end of input at %d, but %d bytes were received", ErrInputEOF, off, in.received)
	case in.closing && in.closeAt == int64(off):
		return nil
	case in.closing || in.failed != nil:
		return ErrInputClosed
	}
	in.closeAt = int64(off)
	if in.received == off {
		in.closeLocked()
	}
	return nil
}

func (in *Input) closeLocked() {
	in.closing = true
	in.signal()
}

// Cursors returns how many input bytes were received and written.
func (in *Input) Cursors() (received, written uint64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.received, in.written
}

// Subscribe has fn told the cursors every InputProgressEvery written
// bytes, under key (a connection), beside every other subscriber: the
// connections that feed the input or are attached to it are each told,
// whatever the others do. fn runs without the Input's lock, so it must
// not wait (a connection that does not read must not hold up the input);
// reports may arrive out of order, the newest counts.
func (in *Input) Subscribe(key any, fn func(received, written uint64)) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.failed != nil {
		return // no more reports
	}
	if in.progress == nil {
		in.progress = map[any]func(received, written uint64){}
	}
	in.progress[key] = fn
}

// Unsubscribe stops the reports to key.
func (in *Input) Unsubscribe(key any) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.progress, key)
}

// reportLocked makes a report due once enough was written since the last.
func (in *Input) reportLocked() {
	if len(in.progress) == 0 || in.written-in.lastReport < InputProgressEvery {
		return
	}
	in.lastReport = in.written
	fns := make([]func(received, written uint64), 0, len(in.progress))
	for _, fn := range in.progress {
		fns = append(fns, fn)
	}
	r, w := in.received, in.written
	in.due = func() {
		for _, fn := range fns {
			fn(r, w)
		}
	}
}

// WriteWait queues all of p or none of it: it waits while the queue has no
// room for p (a p larger than the whole queue goes in once the queue is
// empty), until ctx ends. An error means nothing of p was taken.
func (in *Input) WriteWait(ctx context.Context, p []byte) error {
	for {
		in.mu.Lock()
		full := in.queued > 0 && in.queued+len(p) > in.max
		if !full || in.closing || in.failed != nil {
			err := in.writeLocked(p)
			if err == ErrInputFull { // larger than the queue: it is empty now
				in.received += uint64(len(p))
				in.enqueueLocked(p)
				in.signal()
				err = nil
			}
			in.unlock()
			return err
		}
		if in.room == nil {
			in.room = make(chan struct{})
		}
		room := in.room
		in.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
