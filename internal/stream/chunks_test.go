package stream

import (
	"bytes"
	"math/rand"
	"testing"
)

// TestChunksAgainstModel drives a log's chunks with random fills, drops
// and reads and checks every read against the byte each position must
// hold; the memory they hold never exceeds what is retained by more than
// two chunks.
func TestChunksAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	// Position p holds byte p%251: pattern[p%251:] is what follows p.
	pattern := make([]byte, 251+maxChunk+(300<<10))
	for i := range pattern {
		pattern[i] = byte(i % 251)
	}
	at := func(pos uint64, n int) []byte { return pattern[pos%251:][:n] }
	var c byteChunks
	var pool chunkPool
	var start, end uint64 // retained positions
	for i := 0; i < 5000; i++ {
		switch rng.Intn(4) {
		case 0, 1: // write up to 600 KiB, chunk by chunk
			n := rng.Intn(600 << 10)
			for n > 0 {
				if c.room() == 0 {
					c.add(pool.get(c.nextSize()), end)
				}
				tl := c.tail()
				k := min(n, len(tl.buf)-tl.n)
				copy(tl.buf[tl.n:], at(end, k))
				tl.n += k
				end += uint64(k)
				n -= k
			}
		case 2: // discard
			start += uint64(rng.Int63n(int64(end-start) + 1))
			whole := start == end && rng.Intn(2) == 0
			for _, ch := range c.dropBelow(start, whole, nil) {
				pool.put(ch)
			}
			if len(c.chunks) == 0 {
				c.shrink()
			}
		case 3: // read
			if start == end {
				continue
			}
			pos := start + uint64(rng.Int63n(int64(end-start)))
			p := make([]byte, rng.Intn(300<<10)+1)
			n := c.readAt(p, pos)
			if n != int(min(uint64(len(p)), end-pos)) {
				t.Fatalf("step %d: readAt(%d) = %d bytes", i, pos, n)
			}
			if !bytes.Equal(p[:n], at(pos, n)) {
				t.Fatalf("step %d: readAt(%d): wrong bytes", i, pos)
			}
		}
		if tl := c.tail(); tl != nil && tl.off+uint64(tl.n) != end {
			t.Fatalf("step %d: last chunk ends at %d, the log at %d", i, tl.off+uint64(tl.n), end)
		}
		if m := c.mem(); m > int(end-start)+2*maxChunk {
			t.Fatalf("step %d: %d bytes of chunks for %d retained", i, m, end-start)
		}
	}
}
