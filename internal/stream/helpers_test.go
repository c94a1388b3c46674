package stream_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

// waitLong bounds every wait for something that must happen; it is far
// above what a loaded 2-core machine needs.
const waitLong = 20 * time.Second

// TestMain fails the run if any test leaves a goroutine behind (a blocked
// writer, a sweeper, an input copier).
func TestMain(m *testing.M) {
	before := runtime.NumGoroutine()
	code := m.Run()
	if code == 0 {
		if n := settleGoroutines(before); n > before {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			fmt.Fprintf(os.Stderr, "goroutine leak: %d before, %d after\n%s\n", before, n, buf)
			code = 1
		}
	}
	os.Exit(code)
}

// settleGoroutines waits for the goroutine count to fall to want and
// returns the last count seen.
func settleGoroutines(want int) int {
	deadline := time.Now().Add(waitLong)
	n := runtime.NumGoroutine()
	for n > want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}

// checkNoLeak records the goroutine count and, at cleanup, fails the test
// if it does not come back down. Not for parallel tests.
func checkNoLeak(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		if n := settleGoroutines(before); n > before {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Errorf("goroutine leak: %d before, %d after\n%s", before, n, buf)
		}
	})
}

func randBytes(rng *rand.Rand, n int) []byte {
	p := make([]byte, n)
	rng.Read(p)
	return p
}

func newStream(t *testing.T, grace time.Duration, chans ...stream.ChannelSpec) *stream.Stream {
	t.Helper()
	r := stream.NewRegistry(0)
	t.Cleanup(r.Close)
	return r.Create(stream.Config{Kind: stream.KindProcess, Channels: chans, Grace: grace})
}

func byteChan(name string, p stream.Policy, capacity int) stream.ChannelSpec {
	return stream.ChannelSpec{Name: name, Unit: stream.Bytes, Policy: p, Capacity: capacity}
}

func eventChan(name string, p stream.Policy, capacity int) stream.ChannelSpec {
	return stream.ChannelSpec{Name: name, Unit: stream.Events, Policy: p, Capacity: capacity}
}

// seqEvent is the encoding tests give events: the seq, then filler, so a
// reader can check that the event it got is the one with the seq it expects.
func seqEvent(seq uint64, size int) []byte {
	p := make([]byte, max(size, 8))
	binary.BigEndian.PutUint64(p, seq)
	return p
}

func eventSeq(p []byte) uint64 { return binary.BigEndian.Uint64(p) }

// ackMode is when a test reader acknowledges.
type ackMode uint8

const (
	ackNever    ackMode = iota
	ackAll              // after every item, its cursor after the item (gaps too)
	ackDataOnly         // after data and events only: what it actually received
)

// reader consumes an attachment like a client would and records every item.
type reader struct {
	a        *stream.Attachment
	maxChunk int
	ack      ackMode
	pause    func(i int) // called before each Next, to make slow readers
}

// run reads until io.EOF (or ctx/another error) and returns the items,
// data copied. It never calls t.Fatal, so it can run in any goroutine.
func (r reader) run(ctx context.Context) ([]stream.Item, error) {
	var items []stream.Item
	for i := 0; ; i++ {
		if r.pause != nil {
			r.pause(i)
		}
		it, err := r.a.Next(ctx, nil, r.maxChunk)
		if errors.Is(err, io.EOF) {
			return items, nil
		}
		if err != nil {
			return items, err
		}
		items = append(items, it)
		var cur map[string]uint64
		switch {
		case r.ack == ackNever:
		case it.Kind == stream.ItemData:
			cur = map[string]uint64{it.Channel: it.Offset + uint64(len(it.Data))}
		case it.Kind == stream.ItemEvent:
			cur = map[string]uint64{it.Channel: eventSeq(it.Data)}
		case it.Kind == stream.ItemGap && r.ack == ackAll:
			cur = r.a.Sent()
		}
		if cur != nil {
			if err := r.a.Ack(cur); err != nil {
				return items, fmt.Errorf("ack %v: %w", cur, err)
			}
		}
	}
}

// channelView is what one channel's items amount to.
type channelView struct {
	cursor    uint64 // where the client stands after the items
	delivered uint64 // positions received as data or events
	gapped    uint64 // positions announced as gaps
	gaps      int
}

// checkBytes verifies that a byte channel's items, starting at cursor
// from, are contiguous (every data item and gap starts where the previous
// one stopped), that every data byte equals src at its offset, and that
// gaps never touch data. src may be nil to skip the content check.
func checkBytes(items []stream.Item, ch string, from uint64, src []byte) (channelView, error) {
	v := channelView{cursor: from}
	for i, it := range items {
		if it.Channel != ch || (it.Kind != stream.ItemData && it.Kind != stream.ItemGap) {
			continue
		}
		switch it.Kind {
		case stream.ItemData:
			if it.Offset != v.cursor {
				return v, fmt.Errorf("item %d: data at %d, want %d", i, it.Offset, v.cursor)
			}
			if len(it.Data) == 0 {
				return v, fmt.Errorf("item %d: empty data at %d", i, it.Offset)
			}
			if src != nil && !bytes.Equal(it.Data, src[it.Offset:it.Offset+uint64(len(it.Data))]) {
				return v, fmt.Errorf("item %d: %d bytes at %d differ from what was written", i, len(it.Data), it.Offset)
			}
			v.cursor += uint64(len(it.Data))
			v.delivered += uint64(len(it.Data))
		case stream.ItemGap:
			if it.From != v.cursor || it.To <= it.From {
				return v, fmt.Errorf("item %d: gap [%d,%d) at cursor %d", i, it.From, it.To, v.cursor)
			}
			v.gapped += it.To - it.From
			v.gaps++
			v.cursor = it.To
		}
	}
	return v, nil
}

// checkEvents is checkBytes for an event channel whose events were built
// with seqEvent: every event must carry the seq that follows the cursor,
// and a gap [A,B) must start at cursor+1.
func checkEvents(items []stream.Item, ch string, from uint64) (channelView, error) {
	v := channelView{cursor: from}
	for i, it := range items {
		if it.Channel != ch {
			continue
		}
		switch it.Kind {
		case stream.ItemEvent:
			if got := eventSeq(it.Data); got != v.cursor+1 {
				return v, fmt.Errorf("item %d: event seq %d, want %d", i, got, v.cursor+1)
			}
			v.cursor++
			v.delivered++
		case stream.ItemGap:
			if it.From != v.cursor+1 || it.To <= it.From {
				return v, fmt.Errorf("item %d: gap [%d,%d) after seq %d", i, it.From, it.To, v.cursor)
			}
			v.gapped += it.To - it.From
			v.gaps++
			v.cursor = it.To - 1
		}
	}
	return v, nil
}

// lastEnd checks that items end with exactly one ItemEnd and returns it.
func lastEnd(items []stream.Item) (stream.Item, error) {
	for i, it := range items {
		if it.Kind == stream.ItemEnd && i != len(items)-1 {
			return it, fmt.Errorf("ItemEnd at %d of %d items", i, len(items))
		}
	}
	if len(items) == 0 || items[len(items)-1].Kind != stream.ItemEnd {
		return stream.Item{}, errors.New("no ItemEnd at the end")
	}
	return items[len(items)-1], nil
}

func exitEnd(code int) stream.End {
	return stream.End{Reason: stream.ReasonExit, ExitCode: &code}
}

// nextWithin calls Next with a deadline and fails the test on error.
func nextWithin(t *testing.T, a *stream.Attachment, maxChunk int) stream.Item {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	it, err := a.Next(ctx, nil, maxChunk)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return it
}

// expectIdle checks that Next has nothing to give for a while: used to
// show a window or a stall holds. It only asserts absence, so a slow
// machine cannot make it fail.
func expectIdle(t *testing.T, a *stream.Attachment) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	it, err := a.Next(ctx, nil, 1<<20)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next gave %s (err %v), want nothing until the deadline", describe(it), err)
	}
}

func describe(it stream.Item) string {
	switch it.Kind {
	case stream.ItemData:
		return fmt.Sprintf("data %s@%d+%d", it.Channel, it.Offset, len(it.Data))
	case stream.ItemEvent:
		return fmt.Sprintf("event %s seq %d", it.Channel, eventSeq(it.Data))
	case stream.ItemGap:
		return fmt.Sprintf("gap %s [%d,%d)", it.Channel, it.From, it.To)
	case stream.ItemEnd:
		return fmt.Sprintf("end %s %v", it.End.Reason, it.Cursors)
	}
	return "nothing"
}

func describeAll(items []stream.Item) string {
	var b strings.Builder
	for _, it := range items {
		b.WriteString(describe(it))
		b.WriteString("; ")
	}
	return b.String()
}

// within reports whether ch is closed within waitLong.
func within(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(waitLong):
		return false
	}
}

// stillBlocked reports whether ch stays open for a moment.
func stillBlocked(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return false
	case <-time.After(100 * time.Millisecond):
		return true
	}
}
