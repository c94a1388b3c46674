package stream

import "sync"

// The byte log: a Log of Unit Bytes (stdout, stderr, a PTY, a file being
// read) holds its retained bytes in shared chunks (chunks.go), which
// writers fill through Reserve and Commit and readers hand on without a
// copy (NextParked).

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
		short, isShort := err.(shortBy)
		switch {
		case isShort:
			l.s.reg.reclaim(short)
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
		return nil, nil, s.shortLocked(minChunk) // addChunk settles for a small chunk
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

func getScratch() []byte { return scratch.Get().([]byte) }

func putScratch(b []byte) { scratch.Put(b) } //nolint:staticcheck // a slice header is small

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

// readBytesLocked copies retained bytes from pos into p.
func (l *Log) readBytesLocked(p []byte, pos uint64) int {
	return l.data.readAt(p, pos)
}

// keepBytes is keepTail for a byte log.
func (l *Log) keepBytes(n int) {
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
