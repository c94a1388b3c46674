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
	// errShort says the budget has no room for what a write needs; the
	// writer reclaims memory (without holding the stream's lock) and tries
	// again before it waits or discards.
	errShort = errors.New("stream: retention budget short")
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

// Write appends p to a byte log. Under the Block policy it waits for room
// (see the package comment); it returns ErrClosed once the stream ended.
func (l *Log) Write(p []byte) (int, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	written := 0
	for len(p) > 0 {
		room, err := l.reserve(len(p), true)
		if err != nil {
			return written, err
		}
		n := copy(room, p)
		l.commit(n)
		written += n
		p = p[n:]
	}
	return written, nil
}

// Reserve returns room for up to max more bytes at the end of a byte log,
// for the caller to fill (a read from a pipe goes straight into the log)
// and publish with Commit. It waits for room as Write does and returns
// ErrClosed once the stream ended. Until Commit the caller is the log's
// only writer.
func (l *Log) Reserve(max int) ([]byte, error) {
	l.wmu.Lock()
	room, err := l.reserve(max, false)
	if err != nil {
		l.wmu.Unlock()
		return nil, err
	}
	return room, nil
}

// Commit publishes the first n bytes of the room Reserve returned. Bytes
// committed after the stream ended are not part of it.
func (l *Log) Commit(n int) {
	l.commit(n)
	l.wmu.Unlock()
}

// reserve finds room; any accepts whatever room the last chunk has left,
// for a copy (a read would rather start a new chunk than read a few bytes).
func (l *Log) reserve(max int, any bool) ([]byte, error) {
	reclaimed := false
	for {
		room, wait, err := l.tryReserve(max, any, reclaimed)
		switch {
		case err == errShort:
			l.s.reg.reclaim()
			reclaimed = true
		case err != nil:
			return nil, err
		case room != nil:
			return room, nil
		default:
			wait.do()
			reclaimed = false
		}
	}
}

func (l *Log) tryReserve(max int, any, reclaimed bool) ([]byte, *waiter, error) {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.closed {
		return nil, nil, ErrClosed
	}
	want := l.makeRoom(min(max, l.capacity))
	if want == 0 {
		return nil, s.waiterLocked(nil), nil
	}
	if free := l.data.room(); free > 0 && (any || free >= min(want, minRead) || free >= len(l.data.tail().buf)/4) {
		return l.reserveTail(want), nil, nil
	}
	wait := l.addChunk()
	if wait == nil {
		return l.reserveTail(want), nil, nil
	}
	// The budget is full.
	if free := l.data.room(); free > 0 {
		return l.reserveTail(want), nil, nil
	}
	if !reclaimed {
		return nil, nil, errShort
	}
	if l.policy == Block && s.inGraceLocked() {
		return nil, s.waiterLocked(wait), nil
	}
	// Drop: this log's own oldest data makes room for its newest.
	for len(l.data.chunks) > 0 {
		first := l.data.chunks[0]
		if n := int(first.off + uint64(first.n) - l.start); n > 0 {
			l.discard(n)
		} else {
			l.dropChunks(true)
		}
		if l.addChunk() == nil {
			return l.reserveTail(want), nil, nil
		}
	}
	// Nothing left to let go: what the producer writes now is lost, and
	// announced as a gap like any dropped data.
	l.skipping = getScratch()
	return l.skipping[:min(want, len(l.skipping))], nil, nil
}

// addChunk adds a chunk to fill, charged to the budget; when the budget
// has no room it returns a channel closed once memory is given back.
func (l *Log) addChunk() <-chan struct{} {
	s := l.s
	size := l.data.nextSize()
	ok, wait := s.growLocked(int64(size))
	if !ok && l.acked > l.start {
		// What clients acknowledged goes before anything else.
		l.discard(int(l.acked - l.start))
		ok, wait = s.growLocked(int64(size))
	}
	if !ok && size > minChunk {
		size = minChunk
		ok, wait = s.growLocked(int64(size))
	}
	if !ok {
		return wait
	}
	l.data.add(s.budget.chunks.get(size), l.end)
	return nil
}

func (l *Log) reserveTail(n int) []byte {
	t := l.data.tail()
	l.reserving = true
	return t.buf[t.n:min(t.n+n, len(t.buf))]
}

func (l *Log) commit(n int) {
	s := l.s
	s.mu.Lock()
	var buf [4]func()
	hooks := l.commitLocked(n, buf[:0])
	s.mu.Unlock()
	for _, h := range hooks {
		h()
	}
}

// commitLocked is commit under the stream's lock; it returns the hooks of
// parked consumers to call once the lock is released (handoff.go).
func (l *Log) commitLocked(n int, hooks []func()) []func() {
	s := l.s
	if l.skipping != nil {
		putScratch(l.skipping)
		l.skipping = nil
		if n > 0 && !l.closed {
			l.end += uint64(n)
			l.discard(int(l.end - l.start))
			s.notifyLocked()
		}
		return hooks
	}
	l.reserving = false
	if l.closed {
		// Read after the end: not part of the stream. Let the chunk go if
		// the stream's buffers went while it was being filled.
		if s.freed {
			l.dropChunks(true)
		}
		return hooks
	}
	if n > 0 {
		l.data.tail().n += n
		l.end += uint64(n)
		hooks = s.hooksLocked(hooks)
	}
	return hooks
}

// scratch takes what a producer writes to a Drop log while the budget has
// no room at all for it.
var scratch = sync.Pool{New: func() any { return make([]byte, minRead) }}

func getScratch() []byte  { return scratch.Get().([]byte) }
func putScratch(b []byte) { scratch.Put(b) } //nolint:staticcheck // a slice header is small

// Append adds one event to an event log. build receives the event's seq and
// returns its encoding; it runs under the stream's lock, so keep it cheap
// (it may run more than once for the same seq when the log had to wait).
// Under the Block policy Append waits for room like Write.
func (l *Log) Append(build func(seq uint64) []byte) (uint64, error) {
	reclaimed := false
	for {
		var buf [4]func()
		seq, wait, hooks, err := l.tryAppend(build, reclaimed, buf[:0])
		for _, h := range hooks {
			h() // parked consumers' hooks, the lock released (handoff.go)
		}
		switch {
		case err == errShort:
			l.s.reg.reclaim()
			reclaimed = true
		case wait == nil:
			return seq, err
		default:
			wait.do()
			reclaimed = false
		}
	}
}

func (l *Log) tryAppend(build func(seq uint64) []byte, reclaimed bool, hooks []func()) (uint64, *waiter, []func(), error) {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.closed {
		return 0, nil, nil, ErrClosed
	}
	if l.makeRoom(1) == 0 {
		return 0, s.waiterLocked(nil), nil, nil
	}
	seq := l.end + 1
	ev := build(seq)
	cost := int64(len(ev) + eventOverhead)
	ok, wait := s.growLocked(cost)
	if !ok && l.acked > l.start {
		l.discard(int(l.acked - l.start))
		ok, wait = s.growLocked(cost)
	}
	if !ok {
		switch {
		case !reclaimed:
			return 0, nil, nil, errShort
		case l.policy == Block && s.inGraceLocked():
			return 0, s.waiterLocked(wait), nil, nil
		}
		for !ok && l.end > l.start {
			l.discard(1)
			ok, _ = s.growLocked(cost)
		}
		if !ok {
			// No room even for this one event: it is lost, and announced
			// as a gap like any dropped event.
			l.end++
			l.start, l.lost = l.end, l.lost+1
			s.notifyLocked()
			return seq, nil, nil, nil
		}
	}
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
	return seq, nil, s.hooksLocked(hooks), nil
}

// growEvents doubles the event ring (up to capacity), keeping order.
func (l *Log) growEvents() {
	n := min(max(2*len(l.events), 16), l.capacity)
	ring := make([][]byte, n)
	for i := range l.end - l.start {
		ring[i] = l.events[(l.evHead+int(i))%len(l.events)]
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
	freed := 0
	for range n {
		freed += len(l.events[l.evHead]) + eventOverhead
		l.evBytes -= len(l.events[l.evHead])
		l.events[l.evHead] = nil
		l.evHead = (l.evHead + 1) % len(l.events)
	}
	l.s.shrinkLocked(int64(freed))
}

// dropChunks frees the chunks below start; whole lets the last one go too
// (the log is being emptied for good), unless a reservation is in it.
func (l *Log) dropChunks(whole bool) {
	var buf [8]*chunk
	freed := l.data.dropBelow(l.start, whole && !l.reserving, buf[:0])
	if len(freed) == 0 {
		return
	}
	mem := 0
	for _, ch := range freed {
		mem += len(ch.buf)
		ch.unref()
	}
	if len(l.data.chunks) == 0 {
		l.data.shrink()
	}
	l.s.shrinkLocked(int64(mem))
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
		for l.end > l.start && l.evBytes > n {
			l.discard(1)
		}
		if count := int(l.end - l.start); count < len(l.events)/4 {
			ring := make([][]byte, max(count, 1))
			for i := range count {
				ring[i] = l.events[(l.evHead+i)%len(l.events)]
			}
			l.events, l.evHead = ring, 0
		}
		return
	}
	if kept := int(l.end - l.start); kept > n {
		l.discard(kept - n)
	}
	kept := int(l.end - l.start)
	if kept == 0 {
		l.dropChunks(true)
		return
	}
	size := minChunk
	for size < kept {
		size *= 4
	}
	if l.reserving || l.data.mem() <= size {
		return
	}
	if ok, _ := l.s.growLocked(int64(size)); !ok {
		return
	}
	c := l.s.budget.chunks.get(size)
	c.n, c.off = l.data.readAt(c.buf[:kept], l.start), l.start
	old := l.data.chunks
	l.data.chunks = []*chunk{c}
	mem := 0
	for _, ch := range old {
		mem += len(ch.buf)
		ch.unref()
	}
	l.s.shrinkLocked(int64(mem))
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

// readBytesLocked copies retained bytes from pos into p.
func (l *Log) readBytesLocked(p []byte, pos uint64) int {
	return l.data.readAt(p, pos)
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

// Memory returns the bytes of buffers the log holds.
func (l *Log) Memory() int {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.unit == Events {
		return l.evBytes + eventOverhead*int(l.end-l.start)
	}
	return l.data.mem()
}
