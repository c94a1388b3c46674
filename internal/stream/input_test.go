package stream_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

// TestInputOrderAndClose: everything queued reaches the producer in order,
// then CloseInput closes its input exactly once, after the last byte.
func TestInputOrderAndClose(t *testing.T) {
	checkNoLeak(t)
	pr, pw := io.Pipe()
	var closes atomic.Int32
	in := stream.NewInput(pw, func() error { closes.Add(1); return pw.Close() }, 4096)
	t.Cleanup(func() { pr.Close(); in.Stop() }) // if the test fails midway
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(iotestSlow(pr))
		got <- b
	}()
	rng := rand.New(rand.NewSource(40))
	var want []byte
	for len(want) < 200_000 {
		p := randBytes(rng, 1+rng.Intn(1000))
		writeRetrying(t, in, p)
		want = append(want, p...)
		p[0]++ // Write copied p
	}
	if err := in.CloseInput(); err != nil {
		t.Fatal(err)
	}
	if err := in.CloseInput(); !errors.Is(err, stream.ErrInputClosed) {
		t.Fatalf("second CloseInput: %v", err)
	}
	if err := in.Write([]byte("late")); !errors.Is(err, stream.ErrInputClosed) {
		t.Fatalf("Write after CloseInput: %v", err)
	}
	b := <-got
	if !bytes.Equal(b, want) {
		t.Fatalf("producer read %d bytes, %d written, or out of order", len(b), len(want))
	}
	in.Stop()
	if n := closes.Load(); n != 1 {
		t.Fatalf("closeFn ran %d times", n)
	}
}

// iotestSlow reads in small pieces so the queue really fills.
// writeRetrying writes p, waiting while the queue is full: the producer
// is slow on purpose.
func writeRetrying(t *testing.T, in *stream.Input, p []byte) {
	t.Helper()
	for {
		err := in.Write(p)
		if err == nil {
			return
		}
		if !errors.Is(err, stream.ErrInputFull) {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
}

func iotestSlow(r io.Reader) io.Reader {
	return readerFunc(func(p []byte) (int, error) {
		return r.Read(p[:min(len(p), 100)])
	})
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// gateWriter blocks each Write until released, recording what it got.
// After open it lets everything through, so a failing test cannot hang.
type gateWriter struct {
	entered chan struct{}
	release chan error
	quit    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	got     [][]byte
}

func newGateWriter() *gateWriter {
	return &gateWriter{entered: make(chan struct{}, 100), release: make(chan error), quit: make(chan struct{})}
}

// stopInput releases the gate for good and stops in, at the end of t.
func (g *gateWriter) stopInput(t *testing.T, in *stream.Input) {
	t.Cleanup(func() {
		g.once.Do(func() { close(g.quit) })
		in.Stop()
	})
}

func (g *gateWriter) Write(p []byte) (int, error) {
	var err error
	select {
	case g.entered <- struct{}{}:
		select {
		case err = <-g.release:
		case <-g.quit:
		}
	case <-g.quit:
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.got = append(g.got, append([]byte(nil), p...))
	return len(p), err
}

func (g *gateWriter) writes() [][]byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.got
}

// TestInputFullAtBound: the queue, including the write in progress, holds
// at most max bytes; beyond it input is refused, and accepted again once
// the producer has read.
func TestInputFullAtBound(t *testing.T) {
	checkNoLeak(t)
	g := newGateWriter()
	in := stream.NewInput(g, nil, 10)
	g.stopInput(t, in)
	if err := in.Write(make([]byte, 11)); !errors.Is(err, stream.ErrInputFull) {
		t.Fatalf("write above the bound: %v", err)
	}
	if err := in.Write([]byte("0123456")); err != nil {
		t.Fatal(err)
	}
	<-g.entered // the copier is now blocked writing those 7 bytes
	if err := in.Write([]byte("789")); err != nil {
		t.Fatal(err)
	}
	if err := in.Write([]byte("x")); !errors.Is(err, stream.ErrInputFull) {
		t.Fatalf("write beyond 10 queued bytes: %v", err)
	}
	if err := in.Write(nil); err != nil {
		t.Fatalf("empty write at the bound: %v", err)
	}
	g.release <- nil // "0123456" written
	<-g.entered      // the copier is writing "789"
	if err := in.Write([]byte("abcdefg")); err != nil {
		t.Fatalf("write after the producer read 7 bytes: %v", err)
	}
	if err := in.Write([]byte("h")); !errors.Is(err, stream.ErrInputFull) {
		t.Fatalf("write beyond the bound again: %v", err)
	}
	g.release <- nil
	for range 2 { // "" and "abcdefg"
		<-g.entered
		g.release <- nil
	}
	eventually(func() bool { return len(g.writes()) == 4 })
	if w := g.writes(); len(w) != 4 || string(w[0]) != "0123456" || string(w[1]) != "789" || string(w[2]) != "" || string(w[3]) != "abcdefg" {
		t.Fatalf("writes %q", w)
	}
}

// TestInputStop drops what is queued, waits for the copier, and refuses
// later input; closeFn does not run.
func TestInputStop(t *testing.T) {
	checkNoLeak(t)
	g := newGateWriter()
	var closed atomic.Bool
	in := stream.NewInput(g, func() error { closed.Store(true); return nil }, 0)
	g.stopInput(t, in)
	for _, s := range []string{"a", "b", "c"} {
		if err := in.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	<-g.entered
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		in.Stop()
	}()
	if !stillBlocked(stopped) {
		t.Fatal("Stop returned while the copier was still writing")
	}
	g.release <- nil
	if !within(stopped) {
		t.Fatal("Stop did not return")
	}
	eventually(func() bool { return len(g.writes()) >= 1 })
	if w := g.writes(); len(w) != 1 || string(w[0]) != "a" {
		t.Fatalf("writes after Stop %q, want only the one in progress", w)
	}
	if err := in.Write([]byte("d")); !errors.Is(err, stream.ErrInputClosed) {
		t.Fatalf("Write after Stop: %v", err)
	}
	in.Stop() // twice is harmless
	if closed.Load() {
		t.Fatal("closeFn ran on Stop")
	}
}

// TestInputWriteError: a failed write to the producer ends the queue; the
// rest is not written and later input is refused.
func TestInputWriteError(t *testing.T) {
	checkNoLeak(t)
	g := newGateWriter()
	in := stream.NewInput(g, nil, 100)
	g.stopInput(t, in)
	in.Write([]byte("a"))
	in.Write([]byte("b"))
	<-g.entered
	g.release <- io.ErrClosedPipe
	if !eventually(func() bool { return errors.Is(in.Write([]byte("c")), stream.ErrInputClosed) }) {
		t.Fatal("input still accepted after the producer's input failed")
	}
	if w := g.writes(); len(w) != 1 {
		t.Fatalf("writes %q after the failure", w)
	}
	if err := in.CloseInput(); err != nil {
		t.Fatalf("CloseInput after a failure: %v", err)
	}
}

// TestInputDefaultBound: max <= 0 means DefaultInputQueue.
func TestInputDefaultBound(t *testing.T) {
	g := newGateWriter()
	in := stream.NewInput(g, nil, -1)
	g.stopInput(t, in)
	in.Write([]byte{1})
	<-g.entered
	if err := in.Write(make([]byte, stream.DefaultInputQueue-1)); err != nil {
		t.Fatal(err)
	}
	if err := in.Write([]byte{1}); !errors.Is(err, stream.ErrInputFull) {
		t.Fatalf("beyond DefaultInputQueue: %v", err)
	}
}
