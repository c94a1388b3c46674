package stream_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"os"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

// TestInputFileOrder: on a real pipe, writes made straight from Write (the
// pipe has room) and writes queued behind a full pipe (the reader is slow)
// reach the reader in the order they were made, then the pipe closes once.
func TestInputFileOrder(t *testing.T) {
	checkNoLeak(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	in := stream.NewInput(pw, pw.Close, 256<<10)
	t.Cleanup(in.Stop)
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(iotestSlow(pr))
		got <- b
	}()
	rng := rand.New(rand.NewSource(41))
	var want []byte
	for len(want) < 1<<20 { // many times a pipe's 64 KiB buffer
		p := randBytes(rng, 1+rng.Intn(3000))
		writeRetrying(t, in, p)
		want = append(want, p...)
		p[0]++ // Write copied or wrote p before returning
	}
	if err := in.CloseInput(); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, want) {
			t.Fatalf("reader got %d bytes, %d written, or out of order", len(b), len(want))
		}
	case <-time.After(waitLong):
		t.Fatal("the pipe was not closed after the queue drained")
	}
}

// TestInputFileReaderGone: once nobody reads the pipe, input is refused
// with ErrInputClosed instead of piling up.
func TestInputFileReaderGone(t *testing.T) {
	checkNoLeak(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	in := stream.NewInput(pw, nil, 0)
	t.Cleanup(in.Stop)
	if err := in.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	pr.Close()
	if err := in.Write([]byte("second")); !errors.Is(err, stream.ErrInputClosed) {
		t.Fatalf("Write to a pipe without a reader: %v, want ErrInputClosed", err)
	}
	if err := in.Write([]byte("third")); !errors.Is(err, stream.ErrInputClosed) {
		t.Fatalf("Write after the failure: %v", err)
	}
}
