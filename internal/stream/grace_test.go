package stream_test

import (
	"context"
	"math/rand"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

// TestGraceExpiryFallsBackToDrop: after the last client leaves, a writer
// blocked on a full Block log keeps waiting for the grace period, then
// resumes by dropping; a later attach from 0 is told about the gap and
// gets the retained data byte for byte.
func TestGraceExpiryFallsBackToDrop(t *testing.T) {
	checkNoLeak(t)
	const grace = 100 * time.Millisecond
	src := randBytes(rand.New(rand.NewSource(9)), 5000)
	s := newStream(t, grace, byteChan("stdout", stream.Block, 1000))
	l := s.Log("stdout")
	a, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var n int
	go func() {
		defer close(done)
		n, err = l.Write(src)
	}()
	if !stillBlocked(done) {
		t.Fatal("writer did not block on a full log with a client attached")
	}
	if st := l.Stats(); st.End != 1000 {
		t.Fatalf("stats %+v, want the log full at 1000", st)
	}
	closed := time.Now()
	a.Close()
	a.Close() // harmless
	if !within(done) {
		t.Fatal("writer still blocked long after the grace period")
	}
	if waited := time.Since(closed); waited < grace {
		t.Fatalf("writer resumed %v after the last detach, before the %v grace", waited, grace)
	}
	if n != len(src) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if st := l.Stats(); st != (stream.LogStats{Start: 4000, End: 5000, Lost: 4000}) {
		t.Fatalf("stats %+v", st)
	}

	b, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s.Finish(exitEnd(0))
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	items, err := reader{a: b, maxChunk: 300, ack: ackAll}.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) == 0 || items[0].Kind != stream.ItemGap || items[0].From != 0 || items[0].To != 4000 {
		t.Fatalf("items %s, want gap [0,4000) first", describeAll(items))
	}
	v, err := checkBytes(items, "stdout", 0, src)
	if err != nil {
		t.Fatal(err)
	}
	if v.delivered != 1000 || v.gaps != 1 || v.cursor != 5000 {
		t.Fatalf("view %+v", v)
	}
}

// TestGraceStartsAtCreation: a Block stream nobody attached yet holds its
// writer for the grace period (the client may still be on its way), and
// an attach plus ack within the grace releases it without loss.
func TestGraceStartsAtCreation(t *testing.T) {
	checkNoLeak(t)
	t.Run("expires", func(t *testing.T) {
		const grace = 150 * time.Millisecond
		created := time.Now()
		s := newStream(t, grace, byteChan("stdout", stream.Block, 100))
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.Log("stdout").Write(make([]byte, 300))
		}()
		if !within(done) {
			t.Fatal("writer never resumed")
		}
		if waited := time.Since(created); waited < grace {
			t.Fatalf("writer dropped data %v after creation, within the %v grace", waited, grace)
		}
		if st := s.Log("stdout").Stats(); st.Lost != 200 || st.Start != 200 {
			t.Fatalf("stats %+v", st)
		}
	})
	t.Run("attach within grace", func(t *testing.T) {
		s := newStream(t, 0, byteChan("stdout", stream.Block, 100)) // DefaultGrace
		src := randBytes(rand.New(rand.NewSource(1)), 300)
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.Log("stdout").Write(src)
			s.Finish(exitEnd(0))
		}()
		if !stillBlocked(done) {
			t.Fatal("writer did not block on a fresh Block stream within its grace")
		}
		a, err := s.Attach(nil, 50)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		items, err := reader{a: a, maxChunk: 1 << 20, ack: ackDataOnly}.run(ctx)
		if err != nil {
			t.Fatalf("%v after %s", err, describeAll(items))
		}
		if v, err := checkBytes(items, "stdout", 0, src); err != nil || v.gaps != 0 || v.delivered != 300 {
			t.Fatalf("view %+v, %v", v, err)
		}
		if !within(done) {
			t.Fatal("writer did not finish")
		}
	})
}

// TestNegativeGraceMeansNone: with no grace, a Block log nobody is attached
// to drops at once, and blocks again as soon as a client attaches.
func TestNegativeGraceMeansNone(t *testing.T) {
	checkNoLeak(t)
	s := newStream(t, -1, byteChan("stdout", stream.Block, 100))
	l := s.Log("stdout")
	if n, err := l.Write(make([]byte, 250)); n != 250 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if st := l.Stats(); st.Start != 150 || st.Lost != 150 {
		t.Fatalf("stats %+v", st)
	}
	a, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Write([]byte{1})
	}()
	if !stillBlocked(done) {
		t.Fatal("Block log dropped unacknowledged data while a client was attached")
	}
	a.Close()
	if !within(done) {
		t.Fatal("without grace, the last detach did not release the writer")
	}
	if st := l.Stats(); st.Start != 151 || st.End != 251 || st.Lost != 151 {
		t.Fatalf("stats %+v", st)
	}
}
