package stream_test

import (
	"bytes"
	"math/rand"
	"testing"

	"github.com/rayito/rayito-agent/internal/stream"
)

// retained reads everything a log retains through a fresh attachment from
// its start, and checks nothing else comes.
func retained(t *testing.T, s *stream.Stream, l *stream.Log) []stream.Item {
	t.Helper()
	st := l.Stats()
	a, err := s.Attach(map[string]uint64{l.Name(): st.Start}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var items []stream.Item
	for pos := st.Start; pos < st.End; {
		it := nextWithin(t, a, 1<<30)
		if it.Kind == stream.ItemGap || it.Channel != l.Name() {
			t.Fatalf("reading retained [%d,%d): %s", st.Start, st.End, describe(it))
		}
		items = append(items, it)
		switch {
		case it.Kind == stream.ItemEvent:
			pos++
		case len(it.Data) == 0:
			t.Fatalf("empty data item at %d", it.Offset)
		default:
			pos += uint64(len(it.Data))
		}
	}
	return items
}

// TestByteLogAgainstModel: random writes into Drop logs of random sizes
// keep exactly the newest capacity bytes, with exact counters.
func TestByteLogAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewSource(50))
	for round := 0; round < 20; round++ {
		capacity := 1 + rng.Intn(20_000)
		s := newStream(t, 0, byteChan("stdout", stream.Drop, capacity))
		l := s.Log("stdout")
		var all []byte
		var acked uint64 // reading from the start acknowledges the start
		for i := 0; i < 120; i++ {
			p := randBytes(rng, rng.Intn(2*capacity+2))
			if n, err := l.Write(p); n != len(p) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			all = append(all, p...)
			start := max(len(all)-capacity, 0)
			if st := l.Stats(); st != (stream.LogStats{Start: uint64(start), End: uint64(len(all)), Acked: acked, Lost: uint64(start)}) {
				t.Fatalf("round %d write %d (capacity %d): stats %+v, want [%d,%d)", round, i, capacity, st, start, len(all))
			}
			if i%30 == 29 {
				var got []byte
				acked = uint64(start)
				for _, it := range retained(t, s, l) {
					got = append(got, it.Data...)
				}
				if !bytes.Equal(got, all[start:]) {
					t.Fatalf("round %d: retained bytes differ from the newest %d written", round, capacity)
				}
			}
		}
	}
}

// TestEventLogAgainstModel: random event sizes against both bounds (count
// and bytes), including the byte-bound case that wraps the event ring
// below its count capacity and then grows it.
func TestEventLogAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewSource(51))
	for round := 0; round < 40; round++ {
		capacity := 1 + rng.Intn(100)
		maxBytes := 8 + rng.Intn(2000)
		s := newStream(t, 0, eventChan("events", stream.Drop, capacity))
		l := s.Log("events")
		stream.SetEventMaxBytes(l, maxBytes)
		type ev struct {
			seq  uint64
			size int
		}
		var model []ev
		bytesHeld := 0
		var next, acked uint64 = 1, 0
		for i := 0; i < 300; i++ {
			size := 8 + rng.Intn(maxBytes/4+1)
			if rng.Intn(20) == 0 {
				size = maxBytes + rng.Intn(100) // alone above the bound
			}
			seq, err := l.Append(func(seq uint64) []byte { return seqEvent(seq, size) })
			if err != nil || seq != next {
				t.Fatalf("Append = %d, %v; want %d", seq, err, next)
			}
			next++
			if len(model) == capacity {
				bytesHeld -= model[0].size
				model = model[1:]
			}
			model = append(model, ev{seq, size})
			bytesHeld += size
			for bytesHeld > maxBytes && len(model) > 1 {
				bytesHeld -= model[0].size
				model = model[1:]
			}
			start := model[0].seq - 1
			if st := l.Stats(); st != (stream.LogStats{Start: start, End: seq, Acked: acked, Lost: start}) {
				t.Fatalf("round %d append %d (capacity %d, bound %d): stats %+v, want [%d,%d)", round, i, capacity, maxBytes, st, start, seq)
			}
			if rng.Intn(10) == 0 {
				acked = start
				items := retained(t, s, l)
				if len(items) != len(model) {
					t.Fatalf("round %d: %d events retained, model %d", round, len(items), len(model))
				}
				for k, it := range items {
					if eventSeq(it.Data) != model[k].seq || len(it.Data) != model[k].size {
						t.Fatalf("round %d: retained %s (%d bytes), want seq %d (%d bytes)", round, describe(it), len(it.Data), model[k].seq, model[k].size)
					}
				}
			}
		}
	}
}
