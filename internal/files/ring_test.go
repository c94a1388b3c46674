package files

import (
	"bytes"
	"crypto/sha256"
	"math/rand"
	"testing"
)

// TestRing feeds random sizes through the ring, taking random amounts,
// and checks the bytes come out in order and the bound holds.
func TestRing(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewSource(7))
	src := make([]byte, 1<<20)
	rng.Read(src)
	r := ring{max: 256 << 10}
	in, out := sha256.New(), sha256.New()
	var inN, outN int
	for range 5000 {
		if n := rng.Intn(40 << 10); n <= r.free() && rng.Intn(2) == 0 {
			off := rng.Intn(len(src) - n)
			r.write(src[off : off+n])
			in.Write(src[off : off+n])
			inN += n
		}
		if seg := r.peek(); len(seg) > 0 {
			n := rng.Intn(len(seg) + 1)
			out.Write(seg[:n])
			outN += n
			r.consume(n)
		}
		if r.size > r.max || len(r.buf) > r.max {
			t.Fatalf("ring holds %d in %d, bound %d", r.size, len(r.buf), r.max)
		}
	}
	for seg := r.peek(); len(seg) > 0; seg = r.peek() {
		out.Write(seg)
		outN += len(seg)
		r.consume(len(seg))
	}
	if inN != outN || !bytes.Equal(in.Sum(nil), out.Sum(nil)) {
		t.Fatalf("%d bytes in, %d out, or they differ", inN, outN)
	}
}
