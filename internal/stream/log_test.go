package stream_test

import (
	"context"
	"errors"
	"math/rand"
	"strconv"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

// writeRandom writes src to l in random-sized writes and then finishes the
// stream; it reports the first error on errc.
func writeRandom(s *stream.Stream, l *stream.Log, src []byte, seed int64, maxWrite int) <-chan error {
	errc := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewSource(seed))
		for p := src; len(p) > 0; {
			n := min(1+rng.Intn(maxWrite), len(p))
			w, err := l.Write(p[:n])
			if err != nil || w != n {
				errc <- errors.Join(err, errors.New("short write"))
				return
			}
			p = p[n:]
		}
		s.Finish(exitEnd(0))
		errc <- nil
	}()
	return errc
}

// TestBlockLogDeliversEveryByte pushes random data through Block logs much
// smaller than the data, so the ring wraps around many times, with a
// reader that acknowledges as it consumes: nothing may be lost or gapped.
func TestBlockLogDeliversEveryByte(t *testing.T) {
	cases := []struct {
		name                           string
		capacity, window, chunk, write int
		total                          int
	}{
		{"tiny ring below minRing", 1000, 700, 333, 2500, 1 << 20},
		{"ring of exactly minRing", 4096, 4096, 1 << 20, 4096, 2 << 20},
		{"odd ring, small window", 5003, 97, 64, 9000, 1 << 20},
		{"window above capacity", 8192, 1 << 20, 1000, 20000, 3 << 20},
		{"no window", 3000, 0, 777, 5000, 2 << 20},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := randBytes(rand.New(rand.NewSource(int64(i))), tc.total)
			s := newStream(t, 0, byteChan("stdout", stream.Block, tc.capacity))
			a, err := s.Attach(nil, tc.window)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			errc := writeRandom(s, s.Log("stdout"), src, int64(i), tc.write)
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			items, err := reader{a: a, maxChunk: tc.chunk, ack: ackDataOnly}.run(ctx)
			if err != nil {
				t.Fatalf("reader: %v after %d items", err, len(items))
			}
			if err := <-errc; err != nil {
				t.Fatalf("writer: %v", err)
			}
			v, err := checkBytes(items, "stdout", 0, src)
			if err != nil {
				t.Fatal(err)
			}
			if v.gaps != 0 || v.delivered != uint64(tc.total) {
				t.Fatalf("delivered %d of %d bytes with %d gaps", v.delivered, tc.total, v.gaps)
			}
			end, err := lastEnd(items)
			if err != nil {
				t.Fatal(err)
			}
			if end.Cursors["stdout"] != uint64(tc.total) || end.End.Reason != stream.ReasonExit {
				t.Fatalf("end %+v, want exit with stdout cursor %d", end, tc.total)
			}
			st := s.Log("stdout").Stats()
			if st.Lost != 0 || st.End != uint64(tc.total) || st.End-st.Start > uint64(tc.capacity) {
				t.Fatalf("stats %+v: want nothing lost, end %d, at most %d retained", st, tc.total, tc.capacity)
			}
		})
	}
}

// TestDropLogSlowReaderGapsCoverEverything: a slow reader on a Drop log
// loses data, but every position in [0,end) reaches it exactly once, as
// data equal to what was written or inside exactly one gap.
func TestDropLogSlowReaderGapsCoverEverything(t *testing.T) {
	for _, window := range []int{0, 1500, 1 << 20} {
		t.Run("window "+strconv.Itoa(window), func(t *testing.T) {
			t.Parallel()
			const total = 1 << 20
			src := randBytes(rand.New(rand.NewSource(int64(window))), total)
			s := newStream(t, 0, byteChan("stdout", stream.Drop, 4000))
			a, err := s.Attach(nil, window)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			errc := writeRandom(s, s.Log("stdout"), src, 7, 3000)
			slow := func(i int) {
				if i%4 == 0 {
					time.Sleep(200 * time.Microsecond)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			items, err := reader{a: a, maxChunk: 512, ack: ackAll, pause: slow}.run(ctx)
			if err != nil {
				t.Fatalf("reader: %v after %d items", err, len(items))
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			v, err := checkBytes(items, "stdout", 0, src)
			if err != nil {
				t.Fatal(err)
			}
			if v.cursor != total || v.delivered+v.gapped != total {
				t.Fatalf("cursor %d, delivered %d + gapped %d, want %d", v.cursor, v.delivered, v.gapped, total)
			}
			if v.gaps == 0 {
				t.Fatalf("a reader this slow got no gap over %d bytes through a 4000-byte ring", total)
			}
			end, err := lastEnd(items)
			if err != nil {
				t.Fatal(err)
			}
			if end.Cursors["stdout"] != total {
				t.Fatalf("end cursors %v", end.Cursors)
			}
			// Everything gapped was discarded before anyone acknowledged it.
			if st := s.Log("stdout").Stats(); st.Lost < v.gapped || st.Lost > total {
				t.Fatalf("stats %+v, gapped %d", st, v.gapped)
			}
		})
	}
}

// TestDropLogExactGap checks gap bounds and lost accounting on a fixed
// history, and that a reattach from inside the discarded range gets only
// the part it still needs.
func TestDropLogExactGap(t *testing.T) {
	src := randBytes(rand.New(rand.NewSource(3)), 250)
	s := newStream(t, 0, byteChan("stdout", stream.Drop, 100))
	l := s.Log("stdout")
	for _, n := range []int{60, 60, 60, 70} {
		if _, err := l.Write(src[:n]); err != nil {
			t.Fatal(err)
		}
		src = src[n:]
	}
	src = randBytes(rand.New(rand.NewSource(3)), 250)
	if st := l.Stats(); st != (stream.LogStats{Start: 150, End: 250, Acked: 0, Lost: 150}) {
		t.Fatalf("stats %+v", st)
	}
	for _, from := range []uint64{0, 149} {
		a, err := s.Attach(map[string]uint64{"stdout": from}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if it := nextWithin(t, a, 1<<20); it.Kind != stream.ItemGap || it.From != from || it.To != 150 || it.Channel != "stdout" {
			t.Fatalf("from %d: first item %s, want gap [%d,150)", from, describe(it), from)
		}
		it := nextWithin(t, a, 1<<20)
		if it.Kind != stream.ItemData || it.Offset != 150 || string(it.Data) != string(src[150:]) {
			t.Fatalf("from %d: second item %s, want the 100 retained bytes at 150", from, describe(it))
		}
		expectIdle(t, a)
		a.Close()
	}
	// Acknowledged data that is later discarded is not lost.
	a, err := s.Attach(map[string]uint64{"stdout": 150}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	nextWithin(t, a, 1<<20)
	if err := a.Ack(map[string]uint64{"stdout": 200}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Write(make([]byte, 80)); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st != (stream.LogStats{Start: 230, End: 330, Acked: 200, Lost: 180}) {
		t.Fatalf("after ack and overflow: stats %+v, want 30 more lost", st)
	}
}

// TestDropWriteLargerThanCapacity keeps the newest capacity bytes of a
// single huge write.
func TestDropWriteLargerThanCapacity(t *testing.T) {
	src := randBytes(rand.New(rand.NewSource(4)), 100_003)
	s := newStream(t, 0, byteChan("pty", stream.Drop, 4096))
	n, err := s.Log("pty").Write(src)
	if err != nil || n != len(src) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	s.Finish(stream.End{Reason: stream.ReasonClosed})
	a, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	items, err := reader{a: a, maxChunk: 1000}.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, err := checkBytes(items, "pty", 0, src)
	if err != nil {
		t.Fatal(err)
	}
	if v.gaps != 1 || v.gapped != uint64(len(src)-4096) || v.delivered != 4096 {
		t.Fatalf("view %+v: %s", v, describeAll(items))
	}
}

// TestBlockWriterWaitsForAck: a full Block log holds its writer while a
// client is attached, reading alone does not release it, an ack does.
func TestBlockWriterWaitsForAck(t *testing.T) {
	checkNoLeak(t)
	s := newStream(t, 0, byteChan("stdout", stream.Block, 1000))
	l := s.Log("stdout")
	a, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if n, err := l.Write(make([]byte, 1000)); n != 1000 || err != nil {
		t.Fatalf("filling write = %d, %v", n, err)
	}
	done := make(chan struct{})
	var n int
	go func() {
		defer close(done)
		n, err = l.Write([]byte("0123456789"))
	}()
	if !stillBlocked(done) {
		t.Fatalf("write into a full unacknowledged Block log returned (%d, %v)", n, err)
	}
	if it := nextWithin(t, a, 1<<20); it.Kind != stream.ItemData || len(it.Data) != 1000 {
		t.Fatalf("got %s", describe(it))
	}
	if !stillBlocked(done) {
		t.Fatal("reading without acknowledging released the writer")
	}
	if st := l.Stats(); st.End != 1000 || st.Start != 0 {
		t.Fatalf("blocked writer changed the log: %+v", st)
	}
	if err := a.Ack(map[string]uint64{"stdout": 4}); err != nil {
		t.Fatal(err)
	}
	// 4 acknowledged bytes make room for 4; the rest still waits.
	if !stillBlocked(done) {
		t.Fatal("writer finished with only 4 bytes of room")
	}
	if st := l.Stats(); st.End != 1004 || st.Start != 4 || st.Lost != 0 {
		t.Fatalf("after ack 4: %+v, want [4,1004) and nothing lost", st)
	}
	if err := a.Ack(map[string]uint64{"stdout": 1000}); err != nil {
		t.Fatal(err)
	}
	if !within(done) {
		t.Fatal("writer still blocked after everything was acknowledged")
	}
	if n != 10 || err != nil {
		t.Fatalf("write = %d, %v", n, err)
	}
	if st := l.Stats(); st.End != 1010 || st.Start != 10 || st.Lost != 0 || st.Acked != 1000 {
		t.Fatalf("final stats %+v", st)
	}
	it := nextWithin(t, a, 1<<20)
	if it.Kind != stream.ItemData || it.Offset != 1000 || string(it.Data) != "0123456789" {
		t.Fatalf("got %s", describe(it))
	}
}

// TestBlockedWriterEndsOnFinish: Finish wakes a blocked writer with
// ErrClosed and the count it managed to write.
func TestBlockedWriterEndsOnFinish(t *testing.T) {
	checkNoLeak(t)
	s := newStream(t, 0, byteChan("stdout", stream.Block, 100), eventChan("events", stream.Block, 2))
	a, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	done := make(chan struct{})
	var n int
	var werr, aerr error
	go func() {
		n, werr = s.Log("stdout").Write(make([]byte, 250))
		done <- struct{}{}
	}()
	go func() {
		ev := s.Log("events")
		for i := 0; i < 3 && aerr == nil; i++ {
			_, aerr = ev.Append(func(seq uint64) []byte { return seqEvent(seq, 8) })
		}
		done <- struct{}{}
	}()
	if !stillBlocked(done) {
		t.Fatal("writers did not block")
	}
	s.Finish(exitEnd(1))
	for range 2 {
		select {
		case <-done:
		case <-time.After(waitLong):
			t.Fatal("Finish did not wake blocked writers")
		}
	}
	if n != 100 || !errors.Is(werr, stream.ErrClosed) {
		t.Fatalf("blocked Write = %d, %v; want 100, ErrClosed", n, werr)
	}
	if !errors.Is(aerr, stream.ErrClosed) {
		t.Fatalf("blocked Append: %v", aerr)
	}
	if _, err := s.Log("stdout").Write([]byte("x")); !errors.Is(err, stream.ErrClosed) {
		t.Fatalf("Write after Finish: %v", err)
	}
	called := false
	if _, err := s.Log("events").Append(func(uint64) []byte { called = true; return nil }); !errors.Is(err, stream.ErrClosed) || called {
		t.Fatalf("Append after Finish: %v (build called %v)", err, called)
	}
}

// TestLogAccessorsAndDefaults covers names, units, order and default
// capacities.
func TestLogAccessorsAndDefaults(t *testing.T) {
	s := newStream(t, 0,
		stream.ChannelSpec{Name: "stdout", Unit: stream.Bytes, Policy: stream.Drop},
		stream.ChannelSpec{Name: "stderr", Unit: stream.Bytes, Policy: stream.Drop, Capacity: -5},
		stream.ChannelSpec{Name: "events", Unit: stream.Events, Policy: stream.Drop})
	var names []string
	for _, l := range s.Logs() {
		names = append(names, l.Name())
	}
	if len(names) != 3 || names[0] != "stdout" || names[1] != "stderr" || names[2] != "events" {
		t.Fatalf("Logs order %v", names)
	}
	if s.Log("pty") != nil || s.Log("stdout").Unit() != stream.Bytes || s.Log("events").Unit() != stream.Events {
		t.Fatal("Log lookup or Unit wrong")
	}
	for _, name := range []string{"stdout", "stderr"} {
		l := s.Log(name)
		if _, err := l.Write(make([]byte, stream.DefaultByteCapacity)); err != nil {
			t.Fatal(err)
		}
		if st := l.Stats(); st.Start != 0 {
			t.Fatalf("%s dropped below the default capacity: %+v", name, st)
		}
		if _, err := l.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		if st := l.Stats(); st.Start != 1 || st.End != stream.DefaultByteCapacity+1 {
			t.Fatalf("%s default capacity: %+v", name, st)
		}
	}
	ev := s.Log("events")
	for i := 0; i <= stream.DefaultEventCapacity; i++ {
		if _, err := ev.Append(func(seq uint64) []byte { return seqEvent(seq, 8) }); err != nil {
			t.Fatal(err)
		}
	}
	if st := ev.Stats(); st.Start != 1 || st.End != stream.DefaultEventCapacity+1 {
		t.Fatalf("event default capacity: %+v", st)
	}
	c := s.Cursors()
	if len(c) != 3 || c["stdout"] != stream.DefaultByteCapacity+1 || c["events"] != stream.DefaultEventCapacity+1 {
		t.Fatalf("Cursors %v", c)
	}
}
