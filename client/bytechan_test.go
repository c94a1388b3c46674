package client

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"testing"
	"testing/iotest"
	"time"
)

func testHandle() *handle {
	c := &Client{}
	c.send = newSender(c)
	return &handle{c: c, id: 7, done: make(chan struct{})}
}

// TestByteChanOrderAndGaps: frames arriving in pieces, a consumer reading
// in odd sizes while they arrive (so the ring wraps and grows), and gaps
// in between: the consumer sees every byte once, in order, and each gap
// exactly at its place.
func TestByteChanOrderAndGaps(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	src := make([]byte, 3<<20)
	rng.Read(src)
	b := newByteChan(testHandle(), "stdout", 0, 256<<10)
	type gap struct{ from, to uint64 }
	var gaps []gap

	go func() {
		rng := rand.New(rand.NewSource(2))
		off := uint64(0)
		for off < uint64(len(src)) {
			if rng.Intn(20) == 0 {
				to := min(off+uint64(rng.Intn(5000)+1), uint64(len(src)))
				gaps = append(gaps, gap{off, to})
				if err := b.gap(off, to); err != nil {
					panic(err)
				}
				off = to
				continue
			}
			// Stay within the window like the agent does.
			for b.buffered() > 200<<10 {
				time.Sleep(time.Millisecond)
			}
			n := min(uint64(rng.Intn(40<<10)+1), uint64(len(src))-off)
			frame := src[off : off+n]
			pre := min(len(frame), rng.Intn(30))
			if err := b.receive(off, frame[:pre], iotest.HalfReader(bytes.NewReader(frame[pre:]))); err != nil {
				panic(err)
			}
			off += n
		}
		b.finish(io.EOF)
	}()

	var got []byte
	var seen []gap
	pos := uint64(0)
	buf := make([]byte, 7777)
	for {
		n, err := b.Read(buf[:rng.Intn(len(buf))+1])
		got = append(got, buf[:n]...)
		pos += uint64(n)
		var ge *GapError
		switch {
		case errors.As(err, &ge):
			if ge.From != pos {
				t.Fatalf("gap %v reported at %d", ge, pos)
			}
			seen = append(seen, gap{ge.From, ge.To})
			pos = ge.To
		case err == io.EOF:
			goto done
		case err != nil:
			t.Fatal(err)
		}
	}
done:
	if len(seen) != len(gaps) {
		t.Fatalf("%d gaps seen, %d sent", len(seen), len(gaps))
	}
	var want []byte
	last := uint64(0)
	for i, g := range gaps {
		if seen[i] != g {
			t.Fatalf("gap %d: %v, sent %v", i, seen[i], g)
		}
		want = append(want, src[last:g.from]...)
		last = g.to
	}
	want = append(want, src[last:]...)
	if !bytes.Equal(got, want) || pos != uint64(len(src)) {
		t.Fatalf("read %d bytes ending at %d; want %d ending at %d", len(got), pos, len(want), len(src))
	}
	if _, c := b.cursors(); c != uint64(len(src)) {
		t.Fatalf("consumed cursor %d", c)
	}
}

func TestByteChanViolations(t *testing.T) {
	b := newByteChan(testHandle(), "stdout", 100, 1024)
	if err := b.receive(99, []byte("x"), bytes.NewReader(nil)); !errors.Is(err, ErrProtocol) {
		t.Fatalf("data before the cursor: %v", err)
	}
	if err := b.receive(101, []byte("x"), bytes.NewReader(nil)); !errors.Is(err, ErrProtocol) {
		t.Fatalf("data after the cursor: %v", err)
	}
	if err := b.gap(150, 200); !errors.Is(err, ErrProtocol) {
		t.Fatalf("gap not at the cursor: %v", err)
	}
	big := make([]byte, 2*1024+maxPayload+1)
	if err := b.receive(100, nil, bytes.NewReader(big)); !errors.Is(err, ErrProtocol) {
		t.Fatalf("more than the window: %v", err)
	}
}

// TestByteChanWriteTo: io.Copy drains through WriteTo and stops at a gap.
func TestByteChanWriteTo(t *testing.T) {
	b := newByteChan(testHandle(), "stderr", 0, 0)
	b.receive(0, []byte("hello "), bytes.NewReader([]byte("world")))
	b.gap(11, 20)
	b.receive(20, nil, bytes.NewReader([]byte("!")))
	b.finish(io.EOF)
	var out bytes.Buffer
	_, err := io.Copy(&out, b)
	var ge *GapError
	if !errors.As(err, &ge) || out.String() != "hello world" || ge.From != 11 || ge.To != 20 {
		t.Fatalf("first copy: %q %v", out.String(), err)
	}
	if _, err := io.Copy(&out, b); err != nil || out.String() != "hello world!" {
		t.Fatalf("second copy: %q %v", out.String(), err)
	}
}

// TestByteChanLetsGoOfItsRingAtTheEnd: a channel read to its end lets go
// of its ring, which an application keeping a finished handle would
// otherwise hold (up to a window); one whose end is not consumed yet, or
// whose reader goroutine is still writing into the ring, keeps it.
func TestByteChanLetsGoOfItsRingAtTheEnd(t *testing.T) {
	b := newByteChan(testHandle(), "stdout", 0, 1<<20)
	frame := bytes.Repeat([]byte("x"), 300<<10)
	if err := b.receive(0, nil, bytes.NewReader(frame)); err != nil {
		t.Fatal(err)
	}
	b.finish(io.EOF)
	if len(b.buf) < len(frame) {
		t.Fatalf("ring of %d bytes before the bytes were read", len(b.buf))
	}
	if n, err := io.Copy(io.Discard, b); err != nil || n != int64(len(frame)) {
		t.Fatal(n, err)
	}
	if b.buf != nil {
		t.Fatalf("the ring (%d bytes) is kept after the end was read", len(b.buf))
	}
	if n, err := b.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("Read after the end: %d, %v", n, err)
	}

	// A finish from another goroutine (Close) while the reader goroutine
	// is inside receive: the ring must stay until receive is done.
	b = newByteChan(testHandle(), "stdout", 0, 1<<20)
	pr, pw := io.Pipe()
	received := make(chan error)
	go func() { received <- b.receive(0, nil, pr) }()
	pw.Write(frame[:1000])
	b.finish(ErrClosed)
	if _, err := b.Read(make([]byte, 10)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	pw.Write(frame[1000:2000])
	pw.Close()
	if err := <-received; err != nil {
		t.Fatal(err)
	}
	if n, err := io.Copy(io.Discard, b); n != 2000 || !errors.Is(err, ErrClosed) {
		t.Fatalf("after a receive that outlived Close: %d bytes, %v", n, err)
	}
	if b.buf != nil {
		t.Fatal("the ring is kept after the end was read")
	}
}
