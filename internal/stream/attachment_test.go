package stream_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

func TestAttachErrors(t *testing.T) {
	s := newStream(t, 0, byteChan("stdout", stream.Drop, 100), eventChan("events", stream.Drop, 10))
	if _, err := s.Log("stdout").Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Log("events").Append(func(seq uint64) []byte { return seqEvent(seq, 8) }); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		from map[string]uint64
		want error
	}{
		{map[string]uint64{"stderr": 0}, stream.ErrUnknownChannel},
		{map[string]uint64{"stdout": 0, "pty": 0}, stream.ErrUnknownChannel},
		{map[string]uint64{"stdout": 6}, stream.ErrCursorAhead},
		{map[string]uint64{"events": 2}, stream.ErrCursorAhead},
		{map[string]uint64{"stdout": 5, "events": 1 << 40}, stream.ErrCursorAhead},
	} {
		a, err := s.Attach(tc.from, 0)
		if !errors.Is(err, tc.want) || a != nil {
			t.Errorf("Attach(%v) = %v, %v; want %v", tc.from, a, err, tc.want)
		}
	}
	if n := stream.AttachedCount(s); n != 0 {
		t.Fatalf("failed attaches left %d attachments counted", n)
	}
	// At the end exactly is fine; a missing channel starts at 0.
	a, err := s.Attach(map[string]uint64{"events": 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if it := nextWithin(t, a, 2); it.Kind != stream.ItemData || it.Offset != 0 || string(it.Data) != "he" {
		t.Fatalf("got %s", describe(it))
	}
	if it := nextWithin(t, a, 100); it.Kind != stream.ItemData || it.Offset != 2 || string(it.Data) != "llo" {
		t.Fatalf("got %s", describe(it))
	}
	expectIdle(t, a)
	if n := stream.AttachedCount(s); n != 1 {
		t.Fatalf("attached %d", n)
	}
	a.Close()
	a.Close()
	if n := stream.AttachedCount(s); n != 0 {
		t.Fatalf("after double Close attached %d", n)
	}
}

func TestAckErrors(t *testing.T) {
	s := newStream(t, 0, byteChan("stdout", stream.Block, 1000), eventChan("events", stream.Block, 10))
	s.Log("stdout").Write(make([]byte, 500))
	for range 3 {
		s.Log("events").Append(func(seq uint64) []byte { return seqEvent(seq, 8) })
	}
	a, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Ack(map[string]uint64{"stdout": 1}); !errors.Is(err, stream.ErrCursorAhead) {
		t.Fatalf("ack of unsent data: %v", err)
	}
	for range 2 {
		nextWithin(t, a, 200) // stdout [0,200), then an event (round robin)
	}
	for _, tc := range []struct {
		c    map[string]uint64
		want error
	}{
		{map[string]uint64{"stdout": 201}, stream.ErrCursorAhead},
		{map[string]uint64{"events": 2}, stream.ErrCursorAhead},
		{map[string]uint64{"stderr": 0}, stream.ErrUnknownChannel},
		// One bad cursor refuses the whole ack, whatever the map order.
		{map[string]uint64{"stdout": 150, "events": 2}, stream.ErrCursorAhead},
		{map[string]uint64{"stdout": 150, "nope": 0}, stream.ErrUnknownChannel},
		{map[string]uint64{"stdout": 200}, nil},
		{map[string]uint64{"events": 1}, nil},
		{map[string]uint64{"stdout": 100}, nil}, // backwards: ignored
	} {
		if err := a.Ack(tc.c); !errors.Is(err, tc.want) {
			t.Errorf("Ack(%v) = %v, want %v", tc.c, err, tc.want)
		}
		if tc.want != nil {
			if st := s.Log("stdout").Stats(); st.Acked != 0 {
				t.Fatalf("refused Ack(%v) moved stdout to %d", tc.c, st.Acked)
			}
		}
	}
	if st := s.Log("stdout").Stats(); st.Acked != 200 {
		t.Fatalf("stdout acked %d, want 200: a backwards ack must not move it", st.Acked)
	}
	if st := s.Log("events").Stats(); st.Acked != 1 {
		t.Fatalf("events acked %d", st.Acked)
	}
}

// TestByteWindow: never more than window bytes sent and unacknowledged per
// channel, the window is filled exactly when the client stalls, and acks
// reopen it by exactly what they acknowledge.
func TestByteWindow(t *testing.T) {
	const window = 1000
	s := newStream(t, 0, byteChan("stdout", stream.Drop, 1<<20), byteChan("stderr", stream.Drop, 1<<20))
	for _, l := range s.Logs() {
		l.Write(make([]byte, 10_000))
	}
	a, err := s.Attach(nil, window)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	got := map[string]int{}
	for got["stdout"]+got["stderr"] < 2*window {
		it := nextWithin(t, a, 300)
		got[it.Channel] += len(it.Data)
		if got[it.Channel] > window {
			t.Fatalf("%s: %d bytes in flight, window %d", it.Channel, got[it.Channel], window)
		}
	}
	expectIdle(t, a)
	if err := a.Ack(map[string]uint64{"stdout": 250}); err != nil {
		t.Fatal(err)
	}
	it := nextWithin(t, a, 1<<20)
	if it.Channel != "stdout" || it.Offset != window || len(it.Data) != 250 {
		t.Fatalf("after ack 250 got %s, want stdout@1000+250", describe(it))
	}
	expectIdle(t, a)

	// Random acks: the invariant holds at every step.
	rng := rand.New(rand.NewSource(5))
	sent := map[string]uint64{"stdout": window + 250, "stderr": window}
	acked := map[string]uint64{"stdout": 250, "stderr": 0}
	for sent["stdout"]+sent["stderr"] < 20_000 {
		for ch := range sent {
			if rng.Intn(2) == 0 && sent[ch] > acked[ch] {
				acked[ch] += uint64(rng.Intn(int(sent[ch]-acked[ch]) + 1))
				if err := a.Ack(map[string]uint64{ch: acked[ch]}); err != nil {
					t.Fatal(err)
				}
			}
		}
		canSend := false
		for ch := range sent {
			canSend = canSend || (sent[ch] < 10_000 && sent[ch]-acked[ch] < window)
		}
		if !canSend {
			continue
		}
		it := nextWithin(t, a, 1+rng.Intn(400))
		if it.Offset != sent[it.Channel] {
			t.Fatalf("%s at %d, want %d", it.Channel, it.Offset, sent[it.Channel])
		}
		sent[it.Channel] += uint64(len(it.Data))
		if sent[it.Channel]-acked[it.Channel] > window {
			t.Fatalf("%s: sent %d acked %d, window %d", it.Channel, sent[it.Channel], acked[it.Channel], window)
		}
	}
	if s := a.Sent(); s["stdout"] != sent["stdout"] || s["stderr"] != sent["stderr"] {
		t.Fatalf("Sent() = %v, want %v", s, sent)
	}
}

// TestEventWindow: an event channel allows window/256 events in flight,
// and at least one.
func TestEventWindow(t *testing.T) {
	for _, tc := range []struct{ window, events int }{{256 * 3, 3}, {256*3 + 255, 3}, {100, 1}, {stream.DefaultWindow, 4096}} {
		s := newStream(t, 0, eventChan("events", stream.Drop, 10_000))
		for range 5000 {
			s.Log("events").Append(func(seq uint64) []byte { return seqEvent(seq, 8) })
		}
		a, err := s.Attach(nil, tc.window)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= tc.events; i++ {
			if it := nextWithin(t, a, 1); it.Kind != stream.ItemEvent || eventSeq(it.Data) != uint64(i) {
				t.Fatalf("window %d: got %s, want event %d", tc.window, describe(it), i)
			}
		}
		expectIdle(t, a)
		if err := a.Ack(map[string]uint64{"events": 1}); err != nil {
			t.Fatal(err)
		}
		if it := nextWithin(t, a, 1); eventSeq(it.Data) != uint64(tc.events+1) {
			t.Fatalf("window %d: after ack got %s", tc.window, describe(it))
		}
		expectIdle(t, a)
		a.Close()
	}
}

// TestRoundRobinChannels: with both channels full of data, items alternate,
// so a flood on one cannot starve the other; and a stalled channel (its
// window full) does not hold back the other.
func TestRoundRobinChannels(t *testing.T) {
	s := newStream(t, 0, byteChan("stdout", stream.Drop, 1<<20), byteChan("stderr", stream.Drop, 1<<20), eventChan("events", stream.Drop, 100))
	s.Log("stdout").Write(bytes.Repeat([]byte{'o'}, 100_000))
	s.Log("stderr").Write(bytes.Repeat([]byte{'e'}, 100_000))
	a, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var prev string
	for i := 0; i < 50; i++ {
		it := nextWithin(t, a, 1000)
		if it.Channel == prev {
			t.Fatalf("item %d: %s twice in a row", i, it.Channel)
		}
		if i == 20 {
			s.Log("events").Append(func(seq uint64) []byte { return seqEvent(seq, 8) })
		}
		prev = it.Channel
	}

	b, err := s.Attach(nil, 5000)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got := map[string]int{}
	for got["stderr"] < 50_000 {
		it := nextWithin(t, b, 1000)
		got[it.Channel] += max(len(it.Data), 1)
		if it.Channel == "stderr" {
			if err := b.Ack(map[string]uint64{"stderr": it.Offset + uint64(len(it.Data))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got["stdout"] != 5000 {
		t.Fatalf("stalled stdout got %d bytes, want exactly its 5000-byte window", got["stdout"])
	}
}

// TestNextAppendsToDst: data goes into the caller's buffer after what it
// holds, so a connection can reuse one buffer with a frame header in front.
func TestNextAppendsToDst(t *testing.T) {
	s := newStream(t, 0, byteChan("stdout", stream.Drop, 100))
	s.Log("stdout").Write([]byte("world"))
	a, _ := s.Attach(nil, 0)
	defer a.Close()
	dst := append(make([]byte, 0, 64), "hi "...)
	it, err := a.Next(context.Background(), dst, 100)
	if err != nil || string(it.Data) != "world" {
		t.Fatalf("Next = %s, %v", describe(it), err)
	}
	if string(dst[:8]) != "hi world" {
		t.Fatalf("buffer holds %q, want the data appended in place", dst[:8])
	}
}

func TestNextContextCancel(t *testing.T) {
	checkNoLeak(t)
	s := newStream(t, 0, byteChan("stdout", stream.Drop, 100))
	a, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := a.Next(ctx, nil, 100)
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Next after cancel: %v", err)
		}
	case <-time.After(waitLong):
		t.Fatal("Next ignored the cancelled context")
	}
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := a.Next(ctx, nil, 100); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next past deadline: %v", err)
	}
	// The attachment still works afterwards.
	s.Log("stdout").Write([]byte("x"))
	if it := nextWithin(t, a, 100); string(it.Data) != "x" || it.Offset != 0 {
		t.Fatalf("got %s", describe(it))
	}
}
