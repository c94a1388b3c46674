package stream_test

import (
	"bytes"
	"context"
	"math/rand"
	"testing"

	"github.com/rayito/rayito-agent/internal/stream"
)

// nextShared is NextParked with no hook, the claim ended at once.
func nextShared(ctx context.Context, a *stream.Attachment, maxChunk int) (stream.Item, error) {
	it, err := a.NextParked(ctx, maxChunk, nil)
	if err == nil {
		a.Unclaim()
	}
	return it, err
}

// TestNextSharedKeepsDataValid: an item from NextParked is the log's own
// memory, and stays what it was while held, even after the log dropped
// it and reused memory for newer output; reading the whole stream that
// way gives every byte once.
func TestNextSharedKeepsDataValid(t *testing.T) {
	s := newStream(t, 0, byteChan("pty", stream.Drop, 512<<10))
	l := s.Log("pty")
	rng := rand.New(rand.NewSource(7))
	src := randBytes(rng, 4<<20)
	l.Write(src[:300<<10])
	a, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	held, err := nextShared(ctx, a, 256<<10)
	if err != nil || held.Kind != stream.ItemData || held.Offset != 0 || len(held.Data) == 0 {
		t.Fatalf("%s %v", describe(held), err)
	}
	want := bytes.Clone(held.Data)
	// The log drops all of that and reuses memory for newer output.
	l.Write(src[300<<10:])
	if !bytes.Equal(held.Data, want) || !bytes.Equal(held.Data, src[:len(want)]) {
		t.Fatal("a held item changed when the log let its memory go")
	}
	held.Release()
	var got []byte
	next := uint64(len(want))
	for {
		it, err := nextShared(ctx, a, 256<<10)
		if err != nil {
			t.Fatal(err)
		}
		if it.Kind == stream.ItemGap {
			next = it.To
			continue
		}
		if it.Offset != next || !bytes.Equal(it.Data, src[it.Offset:it.Offset+uint64(len(it.Data))]) {
			t.Fatalf("item at %d (want %d): wrong bytes", it.Offset, next)
		}
		next += uint64(len(it.Data))
		got = append(got, it.Data...)
		it.Release()
		if next == uint64(len(src)) {
			break
		}
	}
	if len(got) > 512<<10 || len(got) == 0 {
		t.Fatalf("read %d bytes after the gap, want the last 512 KiB at most", len(got))
	}
}
