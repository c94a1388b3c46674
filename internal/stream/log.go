package stream

import (
	"errors"
	"sync"
)

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
	// (an image in a cell) can be large; the newest event is always kept
	// while the budget has room for it.
	DefaultEventBytes = 64 << 20
)

// eventOverhead is what the budget charges for an event beyond its bytes:
// its slot in the ring and the allocation's header.
const eventOverhead = 32

// minRead is the least room a read from a producer gets, unless a
// quarter of the last chunk is left: below that a new chunk is started
// rather than reading a few bytes per call.
const minRead = 16 << 10

var (
	// ErrClosed is returned by writes to a log whose stream has ended.
	ErrClosed = errors.New("stream: log closed")
)

// shortBy says the budget has no room for the bytes a write needs; the
// writer reclaims (without holding the stream's lock) and tries again
// before it waits or discards.
type shortBy struct {
	least int64 // the least room the write can use
	floor bool  // the write may use the floors' share (the whole budget)
}

func (shortBy) Error() string { return "stream: retention budget short" }

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

	// wmu makes one writer at a time: a Write, or a Reserve until its
	// Commit (the reserved room is filled without the stream's lock).
	wmu       sync.Mutex
	data      byteChunks
	reserving bool   // a reservation in the last chunk awaits its Commit
	skipping  []byte // the reservation is scratch: no memory, its bytes are lost

	events  [][]byte // ring of encoded events
	evHead  int
	evBytes int
}

// Name is the channel name used in cursors ("stdout", "pty", "events").
func (l *Log) Name() string { return l.name }

// Unit reports whether the log counts bytes or events.
func (l *Log) Unit() Unit { return l.unit }

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

// discard drops the n oldest retained positions and frees their memory.
func (l *Log) discard(n int) {
	if n <= 0 {
		return
	}
	if l.acked < l.start+uint64(n) {
		l.lost += l.start + uint64(n) - max(l.acked, l.start)
	}
	l.start += uint64(n)
	if l.unit == Bytes {
		l.dropChunks(false)
		return
	}
	l.dropEvents(n)
}

// trimAcked lets go of what some client acknowledged.
func (l *Log) trimAcked() {
	if l.acked > l.start {
		l.discard(int(l.acked - l.start))
	}
}

// keepTail lets go of all but the last n bytes retained (for an event
// log, the newest events up to n bytes), moved into a chunk of their own
// so that the big chunks go too.
func (l *Log) keepTail(n int) {
	if l.unit == Events {
		l.keepEvents(n)
		return
	}
	l.keepBytes(n)
}

// free lets go of everything retained, for good.
func (l *Log) free() {
	l.discard(int(l.end - l.start))
	if l.unit == Bytes {
		l.dropChunks(true)
		return
	}
	l.events, l.evHead = nil, 0
}

// ackLocked records that some client consumed everything below pos.
func (l *Log) ackLocked(pos uint64) {
	if pos > l.acked {
		l.acked = min(pos, l.end)
	}
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

// Memory returns the bytes of buffers the log holds.
func (l *Log) Memory() int {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.unit == Events {
		return l.evBytes + eventOverhead*int(l.end-l.start)
	}
	return l.data.mem()
}
