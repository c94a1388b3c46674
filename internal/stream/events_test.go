package stream_test

import (
	"context"
	"testing"

	"github.com/rayito/rayito-agent/internal/stream"
)

func appendN(t *testing.T, l *stream.Log, n, size int) {
	t.Helper()
	for range n {
		want := l.Stats().End + 1
		seq, err := l.Append(func(seq uint64) []byte { return seqEvent(seq, size) })
		if err != nil || seq != want {
			t.Fatalf("Append = %d, %v; want seq %d", seq, err, want)
		}
	}
}

// TestEventLogGapsAndSeqs: cursors and gap bounds of an event log are
// seqs (the cursor is the last seq consumed), from any starting cursor.
func TestEventLogGapsAndSeqs(t *testing.T) {
	s := newStream(t, 0, eventChan("events", stream.Drop, 10))
	l := s.Log("events")
	appendN(t, l, 100, 8)
	if st := l.Stats(); st != (stream.LogStats{Start: 90, End: 100, Lost: 90}) {
		t.Fatalf("stats %+v", st)
	}
	s.Finish(stream.End{Reason: stream.ReasonClosed, Message: "unwatch"})
	for _, tc := range []struct {
		from            uint64
		gapFrom, gapTo  uint64
		first, received uint64
	}{
		{0, 1, 91, 91, 10},
		{50, 51, 91, 91, 10},
		{89, 90, 91, 91, 10},
		{90, 0, 0, 91, 10}, // seq 90 consumed: nothing missing
		{95, 0, 0, 96, 5},
		{100, 0, 0, 0, 0},
	} {
		a, err := s.Attach(map[string]uint64{"events": tc.from}, 256*3)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		items, err := reader{a: a, ack: ackAll}.run(ctx)
		cancel()
		a.Close()
		if err != nil {
			t.Fatalf("from %d: %v after %s", tc.from, err, describeAll(items))
		}
		v, err := checkEvents(items, "events", tc.from)
		if err != nil {
			t.Fatalf("from %d: %v", tc.from, err)
		}
		if tc.gapTo != 0 && (items[0].Kind != stream.ItemGap || items[0].From != tc.gapFrom || items[0].To != tc.gapTo) {
			t.Fatalf("from %d: %s, want gap [%d,%d)", tc.from, describeAll(items), tc.gapFrom, tc.gapTo)
		}
		if tc.gapTo == 0 && v.gaps != 0 {
			t.Fatalf("from %d: unexpected gap: %s", tc.from, describeAll(items))
		}
		if v.delivered != tc.received || v.cursor != 100 {
			t.Fatalf("from %d: view %+v, want %d events up to seq 100", tc.from, v, tc.received)
		}
		if tc.received > 0 {
			if first := items[len(items)-int(tc.received)-1]; eventSeq(first.Data) != tc.first {
				t.Fatalf("from %d: first event %s", tc.from, describe(first))
			}
		}
		end, err := lastEnd(items)
		if err != nil || end.Cursors["events"] != 100 || end.End.Message != "unwatch" {
			t.Fatalf("from %d: end %+v, %v", tc.from, end, err)
		}
	}
}

// TestEventLogByteBound: past the byte bound the oldest events go, even on
// a Block log, but the newest one is always kept however big.
func TestEventLogByteBound(t *testing.T) {
	s := newStream(t, 0, eventChan("events", stream.Block, 100))
	l := s.Log("events")
	stream.SetEventMaxBytes(l, 100)
	appendN(t, l, 2, 40)
	if st := l.Stats(); st.Start != 0 || st.End != 2 {
		t.Fatalf("stats %+v", st)
	}
	appendN(t, l, 1, 40) // 120 bytes: seq 1 goes
	if st := l.Stats(); st.Start != 1 || st.End != 3 || st.Lost != 1 {
		t.Fatalf("stats %+v", st)
	}
	appendN(t, l, 1, 500) // alone above the bound: kept, alone
	if st := l.Stats(); st.Start != 3 || st.End != 4 || st.Lost != 3 {
		t.Fatalf("stats %+v", st)
	}
	appendN(t, l, 1, 10) // the big one goes
	if st := l.Stats(); st.Start != 4 || st.End != 5 {
		t.Fatalf("stats %+v", st)
	}
	a, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if it := nextWithin(t, a, 1); it.Kind != stream.ItemGap || it.From != 1 || it.To != 5 {
		t.Fatalf("got %s, want gap [1,5)", describe(it))
	}
	if it := nextWithin(t, a, 1); it.Kind != stream.ItemEvent || eventSeq(it.Data) != 5 || len(it.Data) != 10 {
		t.Fatalf("got %s", describe(it))
	}
}

// TestEventRingWraps drives a Drop event log around its ring many times
// with a reader acknowledging as it goes, then checks what is retained.
func TestEventRingWraps(t *testing.T) {
	s := newStream(t, 0, eventChan("events", stream.Drop, 7))
	l := s.Log("events")
	a, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var next uint64 = 1
	for i := 0; i < 1000; i++ {
		appendN(t, l, 1+i%5, 8+i%3)
		for it := nextWithin(t, a, 1); ; it = nextWithin(t, a, 1) {
			if it.Kind != stream.ItemEvent || eventSeq(it.Data) != next {
				t.Fatalf("round %d: got %s, want event %d", i, describe(it), next)
			}
			next++
			if next > l.Stats().End {
				break
			}
		}
		if err := a.Ack(a.Sent()); err != nil {
			t.Fatal(err)
		}
	}
	if st := l.Stats(); st.Lost != 0 || st.End-st.Start != 7 || st.Acked != st.End {
		t.Fatalf("stats %+v", st)
	}
	b, err := s.Attach(map[string]uint64{"events": l.Stats().Start}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for seq := l.Stats().Start + 1; seq <= l.Stats().End; seq++ {
		if it := nextWithin(t, b, 1); eventSeq(it.Data) != seq {
			t.Fatalf("retained event %s, want %d", describe(it), seq)
		}
	}
}
