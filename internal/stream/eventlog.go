package stream

// The event log: a Log of Unit Events (a watch, a cell, a relay, an
// upload's progress) holds each event's body as its producer encoded it,
// in a ring that grows to the log's capacity; its positions are seqs.

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
		short, isShort := err.(shortBy)
		switch {
		case isShort:
			l.s.reg.reclaim(short)
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
			return 0, nil, nil, s.shortLocked(cost)
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

// eventLocked returns the encoded event at position pos.
func (l *Log) eventLocked(pos uint64) []byte {
	return l.events[(l.evHead+int(pos-l.start))%len(l.events)]
}

// dropEvents frees the n oldest events, already below start.
func (l *Log) dropEvents(n int) {
	freed := 0
	for range n {
		freed += len(l.events[l.evHead]) + eventOverhead
		l.evBytes -= len(l.events[l.evHead])
		l.events[l.evHead] = nil
		l.evHead = (l.evHead + 1) % len(l.events)
	}
	l.s.shrinkLocked(int64(freed))
}

// keepEvents is keepTail for an event log: the newest events up to n
// bytes, in a ring that shrinks when most of it is empty.
func (l *Log) keepEvents(n int) {
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
}
