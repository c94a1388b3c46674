package stream_test

import (
	"bytes"
	"context"
	"io"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

// parkedConsumer runs NextParked in a goroutine, as an endpoint's pump
// does, and hands what it returns to the test.
type parkedConsumer struct {
	a     *stream.Attachment
	items chan stream.Item
	errs  chan error
	hooks chan struct{} // one value per hook call
}

func parkConsumer(t *testing.T, a *stream.Attachment, maxChunk int) *parkedConsumer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &parkedConsumer{a: a, items: make(chan stream.Item, 16), errs: make(chan error, 1), hooks: make(chan struct{}, 64)}
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
	})
	go func() {
		defer close(done)
		for {
			it, err := a.NextParked(ctx, maxChunk, func() { c.hooks <- struct{}{} })
			if err != nil {
				c.errs <- err
				return
			}
			c.items <- it
		}
	}()
	return c
}

// parked is a stream with one channel (a byte channel "out" unless
// given), attached with window, and a consumer parked on the attachment.
func parked(t *testing.T, window, maxChunk int, ch ...stream.ChannelSpec) (*stream.Stream, *stream.Attachment, *parkedConsumer) {
	t.Helper()
	if len(ch) == 0 {
		ch = []stream.ChannelSpec{byteChan("out", stream.Block, 1<<20)}
	}
	s := newStream(t, 0, ch...)
	a, err := s.Attach(nil, window)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	c := parkConsumer(t, a, maxChunk)
	waitParked(t, s, a)
	return s, a, c
}

// waitParked waits until the consumer waits with its hook armed: an
// append then calls the hook.
func waitParked(t *testing.T, s *stream.Stream, a *stream.Attachment) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for !stream.Armed(a) {
		if time.Now().After(deadline) {
			t.Fatal("the consumer never parked")
		}
		time.Sleep(time.Millisecond)
	}
}

func (c *parkedConsumer) noItem(t *testing.T, why string) {
	t.Helper()
	select {
	case it := <-c.items:
		t.Fatalf("%s: the consumer woke and took %s", why, describe(it))
	case <-time.After(50 * time.Millisecond):
	}
}

// ended checks that the consumer's NextParked ended with io.EOF.
func (c *parkedConsumer) ended(t *testing.T, when string) {
	t.Helper()
	select {
	case err := <-c.errs:
		if err != io.EOF {
			t.Fatalf("%s: %v, want io.EOF", when, err)
		}
	case <-time.After(waitLong):
		t.Fatalf("%s: the consumer did not end", when)
	}
}

// hooked waits for a call of the hook.
func (c *parkedConsumer) hooked(t *testing.T, after string) {
	t.Helper()
	select {
	case <-c.hooks:
	case <-time.After(waitLong):
		t.Fatalf("%s did not call the hook", after)
	}
}

func (c *parkedConsumer) item(t *testing.T) stream.Item {
	t.Helper()
	select {
	case it := <-c.items:
		return it
	case err := <-c.errs:
		t.Fatalf("the consumer ended: %v", err)
	case <-time.After(waitLong):
		t.Fatal("the consumer was never woken")
	}
	return stream.Item{}
}

// TestParkedConsumerHook: an append calls a parked consumer's hook
// instead of waking it, and the hook takes the data; an ack wakes it.
func TestParkedConsumerHook(t *testing.T) {
	s, a, c := parked(t, 5, 1<<10)
	s.Log("out").Write([]byte("echo"))
	c.hooked(t, "the append")
	it, ok := a.TakeParked(1<<10, 16)
	if !ok || it.Kind != stream.ItemData || string(it.Data) != "echo" || it.Offset != 0 {
		t.Fatalf("TakeParked: %s %v", describe(it), ok)
	}
	it.Release()
	c.noItem(t, "while the hook holds the claim")
	// A second producer's hook finds the claim held and leaves the new
	// data to the holder, which looks again once it has passed its item on.
	s.Log("out").Write([]byte("!"))
	if it, ok := a.TakeParked(1<<10, 16); ok {
		t.Fatalf("TakeParked took %s while the claim was held", describe(it))
	}
	a.Unclaim()
	if it, ok := a.TakeParked(1<<10, 16); !ok || string(it.Data) != "!" || it.Offset != 4 {
		t.Fatalf("after the claim: %s %v", describe(it), ok)
	} else {
		it.Release()
	}
	a.Unclaim()
	if _, ok := a.TakeParked(1<<10, 16); ok {
		t.Fatal("TakeParked found an item twice")
	}
	c.noItem(t, "after the hook sent everything")

	// The window (5 bytes) is full: an append's hook finds nothing it may
	// send; the ack that opens the window wakes the consumer, which sends.
	waitParked(t, s, a)
	s.Log("out").Write([]byte("more"))
	c.hooked(t, "the append")
	if it, ok := a.TakeParked(1<<10, 16); ok {
		t.Fatalf("TakeParked took %s beyond the window", describe(it))
	}
	c.noItem(t, "with the window full")
	a.Ack(map[string]uint64{"out": 5})
	if it := c.item(t); string(it.Data) != "more" || it.Offset != 5 {
		t.Fatalf("after the ack: %s", describe(it))
	} else {
		it.Release()
	}
	a.Unclaim()
}

// TestParkedBacklogWakesConsumer: more than the hook's limit is the
// consumer's to send: TakeParked refuses and wakes it.
func TestParkedBacklogWakesConsumer(t *testing.T) {
	s, a, c := parked(t, 0, 64<<10)
	big := bytes.Repeat([]byte("x"), 100) // one append: one hook call
	s.Log("out").Write(big)
	c.hooked(t, "the append")
	if it, ok := a.TakeParked(64<<10, 16); ok {
		t.Fatalf("TakeParked took a backlog over its limit: %s", describe(it))
	}
	var got []byte
	for len(got) < len(big) {
		it := c.item(t)
		got = append(got, it.Data...)
		it.Release()
		a.Unclaim()
	}
	if !bytes.Equal(got, big) {
		t.Fatalf("the consumer got %d bytes, want the 100 written", len(got))
	}
}

// TestParkedConsumerWaitsForClaim: a consumer woken while a hook holds
// the claim waits for it to end, then goes on after the hook's item.
func TestParkedConsumerWaitsForClaim(t *testing.T) {
	s, a, c := parked(t, 0, 1<<10)
	s.Log("out").Write([]byte("one"))
	c.hooked(t, "the append")
	it, ok := a.TakeParked(1<<10, 16)
	if !ok {
		t.Fatal("TakeParked took nothing")
	}
	it.Release()
	a.Cut(stream.End{Reason: stream.ReasonResume})
	c.noItem(t, "woken by the cut while the hook holds the claim")
	a.Unclaim()
	if it := c.item(t); it.Kind != stream.ItemEnd || it.Cursors["out"] != 3 {
		t.Fatalf("after the claim: %s, want the end at 3", describe(it))
	}
	a.Unclaim()
	c.ended(t, "after the end item")
}

// TestParkedCloseEndsConsumer: closing the attachment ends a parked
// consumer, and a hook finds nothing to take.
func TestParkedCloseEndsConsumer(t *testing.T) {
	s, a, c := parked(t, 0, 1<<10)
	a.Close()
	c.ended(t, "after Close")
	s.Log("out").Write([]byte("late"))
	if _, ok := a.TakeParked(1<<10, 16); ok {
		t.Fatal("TakeParked took from a closed attachment")
	}
}

// TestParkedDeliveryInOrder: producers writing small and large pieces on
// two channels while a consumer and its hook both send, as a pump and the
// producers' goroutines do: every byte arrives once, in order, whoever
// sent it, and both sent some.
func TestParkedDeliveryInOrder(t *testing.T) {
	checkNoLeak(t)
	s := newStream(t, 0, byteChan("out", stream.Block, 1<<20), byteChan("err", stream.Block, 1<<20))
	a, err := s.Attach(nil, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rng := rand.New(rand.NewSource(3))
	src := map[string][]byte{"out": randBytes(rng, 2<<20), "err": randBytes(rng, 1<<20)}

	var mu sync.Mutex // the sink: what a connection would get, in order
	got := map[string][]byte{}
	byWho := map[string]int{}
	sink := func(who string, it stream.Item) {
		mu.Lock()
		defer mu.Unlock()
		if it.Kind == stream.ItemData {
			if it.Offset != uint64(len(got[it.Channel])) {
				t.Errorf("%s sent %s at %d, %d received", who, it.Channel, it.Offset, len(got[it.Channel]))
			}
			got[it.Channel] = append(got[it.Channel], it.Data...)
			byWho[who]++
		}
		it.Release()
		a.Ack(map[string]uint64{it.Channel: uint64(len(got[it.Channel]))})
	}
	var hook func()
	hook = func() {
		for {
			it, ok := a.TakeParked(4096, 2048)
			if !ok {
				return
			}
			sink("hook", it)
			a.Unclaim()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	consumed := make(chan error, 1)
	go func() {
		for {
			it, err := a.NextParked(ctx, 64<<10, hook)
			if err != nil {
				consumed <- err
				return
			}
			end := it.Kind == stream.ItemEnd
			sink("consumer", it)
			a.Unclaim()
			if end {
				consumed <- nil
				return
			}
		}
	}()
	// One small piece while the consumer is parked (the hook sends it)
	// and one large (the consumer does); then both at random.
	waitParked(t, s, a)
	s.Log("out").Write(src["out"][:10])
	s.Log("err").Write(src["err"][:30000])
	var wg sync.WaitGroup
	for name, data := range map[string][]byte{"out": src["out"][10:], "err": src["err"][30000:]} {
		wg.Add(1)
		go func(l *stream.Log, data []byte, seed int64) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed))
			for len(data) > 0 {
				n := min(len(data), 1+rng.Intn(1500))
				if rng.Intn(10) == 0 {
					n = min(len(data), 20000+rng.Intn(40000))
				}
				l.Write(data[:n])
				data = data[n:]
				if rng.Intn(50) == 0 {
					time.Sleep(100 * time.Microsecond)
				}
			}
		}(s.Log(name), data, int64(len(name)))
	}
	wg.Wait()
	s.Finish(stream.End{Reason: stream.ReasonDone})
	if err := <-consumed; err != nil {
		t.Fatal(err)
	}
	for name, data := range src {
		if !bytes.Equal(got[name], data) {
			t.Errorf("%s: %d bytes received, want the %d written, in order", name, len(got[name]), len(data))
		}
	}
	if byWho["hook"] == 0 || byWho["consumer"] == 0 {
		t.Errorf("items sent: %v; want both the hook and the consumer to send", byWho)
	}
}

// TestParkedFinishCallsHook: the stream's end goes to a parked consumer's
// hook like an append, and the hook takes the end item.
func TestParkedFinishCallsHook(t *testing.T) {
	s, a, c := parked(t, 0, 1<<10)
	s.Log("out").Write([]byte("bye"))
	c.hooked(t, "the append")
	if it, ok := a.TakeParked(1<<10, 16); !ok || string(it.Data) != "bye" {
		t.Fatalf("TakeParked: %s %v", describe(it), ok)
	} else {
		it.Release()
	}
	a.Unclaim()
	a.TakeParked(1<<10, 16) // nothing: armed again
	s.Finish(stream.End{Reason: stream.ReasonDone})
	c.hooked(t, "Finish")
	c.noItem(t, "after Finish")
	it, ok := a.TakeParked(1<<10, 16)
	if !ok || it.Kind != stream.ItemEnd || it.Cursors["out"] != 3 {
		t.Fatalf("TakeParked after Finish: %s %v", describe(it), ok)
	}
	a.Unclaim()
}

// TestParkedEventCallsHook: an event's append goes to a parked consumer's
// hook like bytes do.
func TestParkedEventCallsHook(t *testing.T) {
	s, a, c := parked(t, 0, 1<<10, eventChan("events", stream.Block, 16))
	if _, err := s.Log("events").Append(func(seq uint64) []byte { return seqEvent(seq, 8) }); err != nil {
		t.Fatal(err)
	}
	c.hooked(t, "the event's append")
	c.noItem(t, "after the event")
	it, ok := a.TakeParked(1<<10, 16)
	if !ok || it.Kind != stream.ItemEvent || eventSeq(it.Data) != 1 {
		t.Fatalf("TakeParked: %s %v", describe(it), ok)
	}
	a.Unclaim()
}
