package stream

import "errors"

// Unit says what a log's positions count.
type Unit uint8

const (
	// Bytes logs count positions in bytes; the cursor is the absolute offset
	// of the next byte.
	Bytes Unit = iota
	// Events logs count whole events; position p holds the event with seq
	// p+1, so the cursor (the last seq consumed) is also the next position.
	Events
)

// Policy is what a full log does with a new write.
type Policy uint8

const (
	// Block makes the writer wait until retained data is acknowledged, while
	// a client is attached or within the stream's grace period.
	Block Policy = iota
	// Drop discards the oldest data to make room.
	Drop
)

// Defaults and bounds of retention, from the protocol.
const (
	DefaultByteCapacity  = 4 << 20
	MaxByteCapacity      = 256 << 20
	DefaultEventCapacity = 10000
	// DefaultEventBytes bounds the memory of an event log, since one event
	// (an image in a cell) can be large; the newest event is always kept.
	DefaultEventBytes = 64 << 20
)

var (
	// ErrClosed is returned by writes to a log whose stream has ended.
	ErrClosed = errors.New("stream: log closed")
)

// Log is one channel of a stream: an append-only sequence of bytes or
// events of which a bounded suffix is retained. Positions never reset.
type Log struct {
	s        *Stream
	name     string
	unit     Unit
	policy   Policy
	capacity int // bytes, or events for event logs
	maxBytes int // event logs only

	start, end uint64 // retained positions are [start, end)
	acked      uint64 // highest position any client acknowledged
	closed     bool
	lost       uint64 // positions discarded before anyone acknowledged them

	bytes   byteRing
	events  [][]byte // ring of encoded events
	evHead  int
	evBytes int
}

// Name is the channel name used in cursors ("stdout", "pty", "events").
func (l *Log) Name() string { return l.name }

// Unit reports whether the log counts bytes or events.
func (l *Log) Unit() Unit { return l.unit }

// Write appends p to a byte log. Under the Block policy it waits for room
// (see the package comment); it returns ErrClosed once the stream ended.
func (l *Log) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n, wait, err := l.tryWrite(p)
		written += n
		p = p[n:]
		if err != nil {
			return written, err
		}
		if wait != nil {
			wait.do()
		}
	}
	return written, nil
}

func (l *Log) tryWrite(p []byte) (int, *waiter, error) {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.closed {
		return 0, nil, ErrClosed
	}
	want := min(len(p), l.capacity)
	if room := l.makeRoom(want); room > 0 {
		n := min(room, len(p))
		l.bytes.write(p[:n], l.capacity)
		l.end += uint64(n)
		s.notifyLocked()
		return n, nil, nil
	}
	return 0, s.waiterLocked(), nil
}

// Append adds one event to an event log. build receives the event's seq and
// returns its encoding; it runs under the stream's lock, so keep it cheap.
// Under the Block policy Append waits for room like Write.
func (l *Log) Append(build func(seq uint64) []byte) (uint64, error) {
	for {
		seq, wait, err := l.tryAppend(build)
		if wait == nil {
			return seq, err
		}
		wait.do()
	}
}

func (l *Log) tryAppend(build func(seq uint64) []byte) (uint64, *waiter, error) {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.closed {
		return 0, nil, ErrClosed
	}
	if l.makeRoom(1) == 0 {
		return 0, s.waiterLocked(), nil
	}
	seq := l.end + 1
	ev := build(seq)
	count := int(l.end - l.start)
	if count == len(l.events) {
		l.growEvents()
	}
	l.events[(l.evHead+count)%len(l.events)] = ev
	l.evBytes += len(ev)
	l.end++
	// Byte bound: drop old events but always keep the newest one.
	for l.evBytes > l.maxBytes && l.end-l.start > 1 {
		l.discard(1)
	}
	s.notifyLocked()
	return seq, nil, nil
}

// growEvents doubles the event ring (up to capacity), keeping order.
func (l *Log) growEvents() {
	n := min(max(2*len(l.events), 16), l.capacity)
	ring := make([][]byte, n)
	for i := range len(l.events) {
		ring[i] = l.events[(l.evHead+i)%len(l.events)]
	}
	l.events, l.evHead = ring, 0
}

// makeRoom frees space for up to want more positions and returns how many
// fit now (0 means the writer must wait).
func (l *Log) makeRoom(want int) int {
	used := int(l.end - l.start)
	if used+want <= l.capacity {
		return want
	}
	need := used + want - l.capacity
	var free int
	if l.policy == Drop || !l.s.inGraceLocked() {
		free = need
	} else if l.acked > l.start {
		free = min(need, int(l.acked-l.start))
	}
	if free > 0 {
		l.discard(free)
	}
	return min(want, l.capacity-int(l.end-l.start))
}

func (l *Log) discard(n int) {
	if l.acked < l.start+uint64(n) {
		l.lost += l.start + uint64(n) - max(l.acked, l.start)
	}
	if l.unit == Bytes {
		l.bytes.discard(n)
	} else {
		for i := 0; i < n; i++ {
			l.evBytes -= len(l.events[l.evHead])
			l.events[l.evHead] = nil
			l.evHead = (l.evHead + 1) % len(l.events)
		}
	}
	l.start += uint64(n)
}

// ackLocked records that some client consumed everything below pos.
func (l *Log) ackLocked(pos uint64) {
	if pos > l.acked {
		l.acked = min(pos, l.end)
	}
}

// readBytesLocked copies retained bytes from pos into p.
func (l *Log) readBytesLocked(p []byte, pos uint64) int {
	return l.bytes.readAt(p, int(pos-l.start))
}

// eventLocked returns the encoded event at position pos.
func (l *Log) eventLocked(pos uint64) []byte {
	return l.events[(l.evHead+int(pos-l.start))%len(l.events)]
}

// LogStats is a snapshot of a log's positions for listings and metrics.
type LogStats struct {
	Start, End uint64 // retained positions
	Acked      uint64
	Lost       uint64 // discarded before any client acknowledged them
}

// Stats returns the log's counters.
func (l *Log) Stats() LogStats {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return LogStats{Start: l.start, End: l.end, Acked: l.acked, Lost: l.lost}
}

// Retained is the memory the log holds for clients in bytes: its output
// buffer as allocated (it grows up to the capacity), or its events'
// encodings.
func (l *Log) Retained() int {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.unit == Events {
		return l.evBytes
	}
	return len(l.bytes.buf)
}
