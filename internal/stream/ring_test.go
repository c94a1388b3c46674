package stream

import (
	"bytes"
	"math/rand"
	"testing"
)

// TestRingAgainstModel drives the ring with random writes, discards and
// reads and compares every read with a plain slice model.
func TestRingAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	const max = 1 << 14
	var r byteRing
	var model []byte
	next := byte(0)
	for i := 0; i < 20000; i++ {
		switch rng.Intn(3) {
		case 0:
			n := rng.Intn(max - len(model) + 1)
			p := make([]byte, n)
			for j := range p {
				p[j] = next
				next++
			}
			r.write(p, max)
			model = append(model, p...)
		case 1:
			n := rng.Intn(len(model) + 1)
			r.discard(n)
			model = model[n:]
		case 2:
			pos := rng.Intn(len(model) + 1)
			p := make([]byte, rng.Intn(max))
			n := r.readAt(p, pos)
			if want := model[pos:]; n != min(len(p), len(want)) || !bytes.Equal(p[:n], want[:n]) {
				t.Fatalf("step %d: readAt(%d) = %d bytes, mismatch", i, pos, n)
			}
		}
		if r.size != len(model) || len(r.buf) > max {
			t.Fatalf("step %d: size %d model %d cap %d", i, r.size, len(model), len(r.buf))
		}
	}
}
