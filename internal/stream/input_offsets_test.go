package stream_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/stream"
)

// TestInputAtOffsets: numbered input is written once and in order, a gap
// is refused with nothing written, an end of input waits for the input
// before it, and progress is reported every quarter of the queue.
func TestInputAtOffsets(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	in := stream.NewInput(w, w.Close, 0)
	defer in.Stop()
	var mu sync.Mutex
	var reports [][2]uint64
	in.Subscribe(t, func(received, written uint64) {
		mu.Lock()
		reports = append(reports, [2]uint64{received, written})
		mu.Unlock()
	})
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		got <- b
	}()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(in.WriteAt(0, []byte("abc")))
	must(in.WriteAt(0, []byte("abc"))) // again: dropped
	must(in.WriteAt(2, []byte("cdef")))
	if err := in.WriteAt(9, []byte("x")); !errors.Is(err, stream.ErrInputGap) {
		t.Fatalf("a gap: %v", err)
	}
	if err := in.CloseAt(3); !errors.Is(err, stream.ErrInputEOF) {
		t.Fatalf("an end below what was received: %v", err)
	}
	big := bytes.Repeat([]byte("z"), 600<<10)
	must(in.CloseAt(uint64(6 + len(big)))) // ahead of its data: waits
	must(in.WriteAt(6, big))
	must(in.CloseAt(uint64(6 + len(big)))) // again: a no-op
	want := append([]byte("abcdef"), big...)
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the reader got %d bytes, want %d", len(b), len(want))
	}
	if rec, wr := in.Cursors(); rec != uint64(len(want)) || wr != uint64(len(want)) {
		t.Fatalf("cursors %d %d", rec, wr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reports) == 0 || reports[0][1] < stream.InputProgressEvery {
		t.Fatalf("progress reports %v, want one once %d bytes were written", reports, stream.InputProgressEvery)
	}
	for i := 1; i < len(reports); i++ {
		if reports[i][1]-reports[i-1][1] < stream.InputProgressEvery {
			t.Fatalf("progress reports %v closer than %d bytes", reports, stream.InputProgressEvery)
		}
	}
}

// TestInputEndsWhereDeclared: input past the end close_stdin declared is
// not written (the client is told), and an end past any possible input
// is refused rather than read as no end.
func TestInputEndsWhereDeclared(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	in := stream.NewInput(w, w.Close, 0)
	defer in.Stop()
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		got <- b
	}()
	if err := in.CloseAt(1 << 63); !errors.Is(err, stream.ErrInputEOF) {
		t.Fatalf("an end at 2^63: %v", err)
	}
	if err := in.CloseAt(5); err != nil {
		t.Fatal(err)
	}
	if err := in.WriteAt(0, []byte("12345678")); !errors.Is(err, stream.ErrInputClosed) {
		t.Fatalf("input past the declared end: %v", err)
	}
	if b := <-got; string(b) != "12345" {
		t.Fatalf("the reader got %q, want the declared 5 bytes", b)
	}
}

// TestInputProgressReportsWhatWasWritten: progress reports the bytes
// written to the program, not those received: with a slow reader, every
// report's written cursor is within a pipe's capacity of what the reader
// took, and behind what was received (a report of received bytes as
// written would open the client's window early).
func TestInputProgressReportsWhatWasWritten(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pipeSize, err := unix.FcntlInt(w.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Fatal(err)
	}
	in := stream.NewInput(w, w.Close, 0)
	defer in.Stop()
	var consumed atomic.Int64
	type report struct{ received, written, consumed uint64 }
	var mu sync.Mutex
	var reports []report
	in.Subscribe(t, func(received, written uint64) {
		mu.Lock()
		reports = append(reports, report{received, written, uint64(consumed.Load())})
		mu.Unlock()
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 16<<10)
		for {
			n, err := r.Read(buf)
			consumed.Add(int64(n))
			if err != nil {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	// Many frames at once, as a client sends them: the queue holds them
	// while the writer feeds the slow reader one at a time.
	chunk := bytes.Repeat([]byte("y"), 16<<10)
	var off uint64
	for range 56 {
		if err := in.WriteAt(off, chunk); err != nil {
			t.Fatal(err)
		}
		off += uint64(len(chunk))
	}
	if err := in.CloseAt(off); err != nil {
		t.Fatal(err)
	}
	<-done
	mu.Lock()
	defer mu.Unlock()
	behind := false
	for _, rp := range reports {
		if rp.written > rp.consumed+uint64(pipeSize)+16<<10 {
			t.Errorf("report %+v: written is past what the reader took plus a pipe (%d)", rp, pipeSize)
		}
		behind = behind || rp.written < rp.received
	}
	if len(reports) == 0 || !behind {
		t.Errorf("reports %+v: want some with written behind received (the reader is slow)", reports)
	}
}
