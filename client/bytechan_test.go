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
