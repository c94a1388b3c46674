package stream_test

import (
	"context"
	"math/rand"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

// stallWait is how long the tests below give an attachment to make
// progress that needs no more input; a stall is what they detect.
const stallWait = 5 * time.Second

// TestAttachCursorCountsAsAck: protocol section 3 gives `from` and `ack`
// the same meaning (what the client has consumed). A client whose last acks
// were lost in a disconnect reattaches from the end of a full Block log;
// the producer must be able to continue, or neither side ever moves.
func TestAttachCursorCountsAsAck(t *testing.T) {
	s := newStream(t, 0, byteChan("stdout", stream.Block, 100))
	l := s.Log("stdout")
	src := randBytes(rand.New(rand.NewSource(2)), 110)
	if _, err := l.Write(src[:100]); err != nil {
		t.Fatal(err)
	}
	first, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	nextWithin(t, first, 1000) // consumed [0,100); its ack never arrives
	first.Close()

	a, err := s.Attach(map[string]uint64{"stdout": 100}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Write(src[100:])
	}()
	t.Cleanup(func() { s.Finish(exitEnd(0)); <-done })
	ctx, cancel := context.WithTimeout(context.Background(), stallWait)
	defer cancel()
	it, err := a.Next(ctx, nil, 1000)
	if err != nil {
		t.Fatalf("reattached from 100 on a full Block log: %v; stats %+v (the log still holds what the "+
			"client said it consumed, so the writer waits for an ack that cannot come)", err, l.Stats())
	}
	if it.Kind != stream.ItemData || it.Offset != 100 || string(it.Data) != string(src[100:]) {
		t.Fatalf("got %s", describe(it))
	}
	if st := l.Stats(); st.Lost != 0 {
		t.Fatalf("stats %+v: nothing a client needed was discarded", st)
	}
}

// TestGapDoesNotFillWindow: positions announced in a gap were never sent,
// so they must not count as in flight. A client that acknowledges exactly
// what it received (data and events) must keep receiving after a gap.
func TestGapDoesNotFillWindow(t *testing.T) {
	t.Run("bytes", func(t *testing.T) {
		s := newStream(t, 0, byteChan("pty", stream.Drop, 1000))
		s.Log("pty").Write(make([]byte, 50_000)) // [49000,50000) retained
		a, err := s.Attach(nil, 4000)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		s.Finish(stream.End{Reason: stream.ReasonClosed})
		ctx, cancel := context.WithTimeout(context.Background(), stallWait)
		defer cancel()
		items, err := reader{a: a, maxChunk: 300, ack: ackDataOnly}.run(ctx)
		if err != nil {
			t.Fatalf("%v after %s", err, describeAll(items))
		}
		v, err := checkBytes(items, "pty", 0, nil)
		if err != nil || v.delivered != 1000 || v.gapped != 49_000 {
			t.Fatalf("view %+v, %v", v, err)
		}
	})
	t.Run("events", func(t *testing.T) {
		s := newStream(t, 0, eventChan("events", stream.Drop, 10))
		for range 100 {
			s.Log("events").Append(func(seq uint64) []byte { return seqEvent(seq, 8) })
		}
		a, err := s.Attach(nil, 256*4) // 4 events in flight
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		s.Finish(stream.End{Reason: stream.ReasonClosed})
		ctx, cancel := context.WithTimeout(context.Background(), stallWait)
		defer cancel()
		items, err := reader{a: a, ack: ackDataOnly}.run(ctx)
		if err != nil {
			t.Fatalf("%v after %s", err, describeAll(items))
		}
		v, err := checkEvents(items, "events", 0)
		if err != nil || v.delivered != 10 || v.gapped != 90 {
			t.Fatalf("view %+v, %v", v, err)
		}
	})
	t.Run("gap while reading", func(t *testing.T) {
		// The reader falls behind mid-stream: the writer laps it while
		// its window is full, then it acknowledges what it had.
		s := newStream(t, 0, byteChan("stdout", stream.Drop, 1000))
		l := s.Log("stdout")
		l.Write(make([]byte, 1000))
		a, err := s.Attach(nil, 500)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		it := nextWithin(t, a, 1000)
		l.Write(make([]byte, 5000)) // retained [5000,6000)
		s.Finish(stream.End{Reason: stream.ReasonClosed})
		if err := a.Ack(map[string]uint64{"stdout": it.Offset + uint64(len(it.Data))}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), stallWait)
		defer cancel()
		items, err := reader{a: a, maxChunk: 1000, ack: ackDataOnly}.run(ctx)
		if err != nil {
			t.Fatalf("%v after %s", err, describeAll(items))
		}
		v, err := checkBytes(items, "stdout", 500, nil)
		if err != nil || v.delivered != 1000 || v.gapped != 4500 {
			t.Fatalf("view %+v, %v: %s", v, err, describeAll(items))
		}
	})
}

// TestAttachCursorWakesBlockedWriter: an attach from a cursor releases
// retention like an ack, so it must wake a writer already waiting for
// room (here while an old attachment, say of a connection that died in a
// resume, is still open and never acks).
func TestAttachCursorWakesBlockedWriter(t *testing.T) {
	s := newStream(t, 0, byteChan("stdout", stream.Block, 100))
	l := s.Log("stdout")
	src := randBytes(rand.New(rand.NewSource(6)), 110)
	l.Write(src[:100])
	old, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	nextWithin(t, old, 1000) // consumed [0,100); its ack never arrives
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Write(src[100:])
	}()
	t.Cleanup(func() { s.Finish(exitEnd(0)); <-done })
	if !stillBlocked(done) {
		t.Fatal("writer did not block on a full Block log")
	}
	a, err := s.Attach(map[string]uint64{"stdout": 100}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), stallWait)
	defer cancel()
	it, err := a.Next(ctx, nil, 1000)
	if err != nil {
		t.Fatalf("attached from 100 while the writer waited: %v; stats %+v (the attach released "+
			"[0,100) but did not wake the writer)", err, l.Stats())
	}
	if it.Kind != stream.ItemData || it.Offset != 100 || string(it.Data) != string(src[100:]) {
		t.Fatalf("got %s", describe(it))
	}
}

// TestFailedAttachReleasesNothing: an attach that fails changes nothing,
// not even retention for the channels named before the bad one.
func TestFailedAttachReleasesNothing(t *testing.T) {
	s := newStream(t, 0, byteChan("stdout", stream.Block, 100), byteChan("stderr", stream.Block, 100))
	s.Log("stdout").Write(make([]byte, 100))
	for range 20 { // map order is random: try both orders
		_, err := s.Attach(map[string]uint64{"stdout": 100, "stderr": 5}, 0)
		if err == nil {
			t.Fatal("attach beyond the end of stderr succeeded")
		}
	}
	if st := s.Log("stdout").Stats(); st.Acked != 0 {
		t.Fatalf("failed attach acknowledged stdout: %+v", st)
	}
	if n := stream.AttachedCount(s); n != 0 {
		t.Fatalf("attached %d", n)
	}
}
