package files

// ring is an upload's input waiting to be written: bytes appended by the
// connection that delivers them and taken by the upload's goroutine. It
// grows from a small start up to its bound, so a small upload stays small
// and a large one costs no allocation per frame.
//
// The appender writes only into free space and the taker reads only
// published bytes, so the taker may read a segment outside the lock that
// guards the indices (the owner's mutex) while appends go on.
type ring struct {
	buf  []byte
	head int // index of the oldest byte
	size int // bytes held
	max  int
}

const ringStart = 64 << 10

// free is how many more bytes the ring takes.
func (r *ring) free() int { return r.max - r.size }

// write appends p, which must fit (len(p) <= free()).
func (r *ring) write(p []byte) {
	if need := r.size + len(p); need > len(r.buf) {
		n := max(len(r.buf), ringStart)
		for n < need {
			n *= 2
		}
		nb := make([]byte, min(n, r.max))
		k := copy(nb, r.buf[r.head:min(r.head+r.size, len(r.buf))])
		copy(nb[k:r.size], r.buf)
		r.buf, r.head = nb, 0
	}
	for len(p) > 0 {
		tail := (r.head + r.size) % len(r.buf)
		end := len(r.buf)
		if tail < r.head {
			end = r.head
		}
		n := copy(r.buf[tail:end], p)
		r.size += n
		p = p[n:]
	}
}

// peek returns the oldest contiguous held bytes (nil when empty).
func (r *ring) peek() []byte {
	if r.size == 0 {
		return nil
	}
	return r.buf[r.head:min(r.head+r.size, len(r.buf))]
}

// consume drops n bytes returned by peek.
func (r *ring) consume(n int) {
	r.size -= n
	r.head += n
	if r.head == len(r.buf) || r.size == 0 {
		r.head = 0
	}
}
