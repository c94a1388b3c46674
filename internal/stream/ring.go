package stream

// byteRing is a growable circular byte buffer. It starts empty and doubles
// up to the capacity its log allows, so idle streams cost almost nothing.
type byteRing struct {
	buf  []byte
	head int // index in buf of the oldest byte
	size int
}

// minRing is the first allocation; small outputs never need more.
const minRing = 4 << 10

// write appends p; the caller guarantees size+len(p) <= max.
func (r *byteRing) write(p []byte, max int) {
	if need := r.size + len(p); need > len(r.buf) {
		r.grow(need, max)
	}
	tail := (r.head + r.size) % len(r.buf)
	n := copy(r.buf[tail:], p)
	copy(r.buf, p[n:])
	r.size += len(p)
}

func (r *byteRing) grow(need, max int) {
	n := len(r.buf)
	if n < minRing {
		n = minRing
	}
	for n < need {
		n *= 2
	}
	if n > max {
		n = max
	}
	nb := make([]byte, n)
	r.readAt(nb[:r.size], 0)
	r.buf, r.head = nb, 0
}

// discard drops the n oldest bytes.
func (r *byteRing) discard(n int) {
	r.size -= n
	if r.size == 0 {
		r.head = 0
		return
	}
	r.head = (r.head + n) % len(r.buf)
}

// readAt copies bytes starting pos bytes after the oldest into p and
// returns how many it copied.
func (r *byteRing) readAt(p []byte, pos int) int {
	if pos >= r.size {
		return 0
	}
	if len(p) > r.size-pos {
		p = p[:r.size-pos]
	}
	start := (r.head + pos) % len(r.buf)
	n := copy(p, r.buf[start:])
	copy(p[n:], r.buf)
	return len(p)
}
