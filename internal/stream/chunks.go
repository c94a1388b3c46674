package stream

import (
	"sort"
	"sync"
	"sync/atomic"
)

// A byte log keeps its retained bytes in chunks of a few sizes. It starts
// with the smallest and each new chunk is four times the last, up to the
// largest: a short output costs 4 KiB, and a fast one is read from its
// pipe 256 KiB at a time straight into the log. Chunks are freed as soon
// as the data in them is discarded, so memory follows what is retained.
const (
	minChunk   = 4 << 10
	maxChunk   = 256 << 10
	chunkSizes = 4 // 4, 16, 64, 256 KiB
)

// chunk is one buffer of a byte log. Its written bytes never change, so
// an item may hand them out without a copy: it holds a reference, and the
// chunk goes back to its pool when the log and every item let go of it.
type chunk struct {
	buf  []byte // full size: one of the chunk sizes
	n    int    // bytes written
	off  uint64 // absolute position of buf[0]
	refs atomic.Int32
	pool *chunkPool
}

// unref drops one reference; the last returns the chunk to its pool.
func (ch *chunk) unref() {
	if ch.refs.Add(-1) == 0 && ch.pool != nil {
		ch.pool.put(ch)
	}
}

// byteChunks is a byte log's storage: chunks in position order, each
// filled up to n; only the last one has free room.
type byteChunks struct {
	chunks []*chunk
	last   int // size of the last chunk added, so the next can be bigger
}

// mem is the memory the chunks hold.
func (c *byteChunks) mem() int {
	total := 0
	for _, ch := range c.chunks {
		total += len(ch.buf)
	}
	return total
}

// tail returns the chunk being filled, or nil.
func (c *byteChunks) tail() *chunk {
	if len(c.chunks) == 0 {
		return nil
	}
	return c.chunks[len(c.chunks)-1]
}

// room is the free room of the chunk being filled.
func (c *byteChunks) room() int {
	if t := c.tail(); t != nil {
		return len(t.buf) - t.n
	}
	return 0
}

// nextSize is the size of the chunk to add when the last one is full.
func (c *byteChunks) nextSize() int {
	return min(max(c.last*4, minChunk), maxChunk)
}

// add appends an empty chunk whose first byte will be at position end.
func (c *byteChunks) add(ch *chunk, end uint64) {
	ch.n, ch.off = 0, end
	c.chunks = append(c.chunks, ch)
	c.last = len(ch.buf)
}

// shrink makes the next chunk small again: the log emptied, and a stream
// that starts writing again after a pause starts small.
func (c *byteChunks) shrink() { c.last = 0 }

// dropBelow removes the chunks whose bytes all lie below start, keeping
// the last chunk unless whole is set (it may be filled further), and
// returns them.
func (c *byteChunks) dropBelow(start uint64, whole bool, out []*chunk) []*chunk {
	i := 0
	for ; i < len(c.chunks); i++ {
		ch := c.chunks[i]
		if ch.off+uint64(ch.n) > start || (i == len(c.chunks)-1 && !whole && ch.n < len(ch.buf)) {
			break
		}
		out = append(out, ch)
	}
	if i > 0 {
		n := copy(c.chunks, c.chunks[i:])
		clear(c.chunks[n:])
		c.chunks = c.chunks[:n]
	}
	return out
}

// slice returns the chunk holding position pos and its written bytes from
// pos on, at most n. pos must be retained.
func (c *byteChunks) slice(pos uint64, n int) (*chunk, []byte) {
	i := sort.Search(len(c.chunks), func(i int) bool {
		ch := c.chunks[i]
		return ch.off+uint64(ch.n) > pos
	})
	ch := c.chunks[i]
	b := ch.buf[pos-ch.off : ch.n]
	return ch, b[:min(len(b), n)]
}

// readAt copies the bytes from position pos into p, up to the last byte
// written, and returns how many it copied. pos must be retained.
func (c *byteChunks) readAt(p []byte, pos uint64) int {
	i := sort.Search(len(c.chunks), func(i int) bool {
		ch := c.chunks[i]
		return ch.off+uint64(ch.n) > pos
	})
	total := 0
	for ; i < len(c.chunks) && total < len(p); i++ {
		ch := c.chunks[i]
		total += copy(p[total:], ch.buf[pos-ch.off:ch.n])
		pos = ch.off + uint64(ch.n)
	}
	return total
}

// chunkPool keeps freed chunks for reuse, a bounded amount of each size:
// at full speed a log goes through thousands of chunks a second, which
// would otherwise all be garbage. drain lets them all go.
type chunkPool struct {
	mu    sync.Mutex
	free  [chunkSizes][]*chunk
	bytes int
}

// poolMax bounds what the pool keeps: a few full-speed streams' worth.
const poolMax = 4 << 20

func sizeClass(size int) int {
	c := 0
	for s := minChunk; s < size; s *= 4 {
		c++
	}
	return c
}

func (p *chunkPool) get(size int) *chunk {
	c := sizeClass(size)
	p.mu.Lock()
	if n := len(p.free[c]); n > 0 {
		ch := p.free[c][n-1]
		p.free[c][n-1] = nil
		p.free[c] = p.free[c][:n-1]
		p.bytes -= size
		p.mu.Unlock()
		ch.refs.Store(1)
		return ch
	}
	p.mu.Unlock()
	ch := &chunk{buf: make([]byte, size), pool: p}
	ch.refs.Store(1)
	return ch
}

func (p *chunkPool) put(ch *chunk) {
	size := len(ch.buf)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bytes+size > poolMax {
		return
	}
	c := sizeClass(size)
	p.free[c] = append(p.free[c], ch)
	p.bytes += size
}

// drain drops every pooled chunk, for the collector to take.
func (p *chunkPool) drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.free {
		clear(p.free[c])
		p.free[c] = nil
	}
	p.bytes = 0
}
