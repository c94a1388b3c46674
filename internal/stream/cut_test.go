package stream_test

import (
	"context"
	"errors"
	"io"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

// TestCutThenResume: Cut ends the attachment with the cursors of what was
// handed out; a new attachment from those cursors continues with no byte
// or event duplicated or missing, as a client does after a resume.
func TestCutThenResume(t *testing.T) {
	checkNoLeak(t)
	src := randBytes(rand.New(rand.NewSource(11)), 300_000)
	s := newStream(t, 0, byteChan("stdout", stream.Block, 10_000), eventChan("events", stream.Block, 50))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		s.Log("stdout").Write(src)
	}()
	go func() {
		defer wg.Done()
		for range 2000 {
			if _, err := s.Log("events").Append(func(seq uint64) []byte { return seqEvent(seq, 8) }); err != nil {
				return
			}
		}
	}()
	go func() {
		wg.Wait()
		s.Finish(exitEnd(0))
	}()
	var all []stream.Item
	from := map[string]uint64{}
	cuts := 0
	for round := 0; ; round++ {
		a, err := s.Attach(from, 4000)
		if err != nil {
			t.Fatal(err)
		}
		var items []stream.Item
		ended := false
		for i := 0; i < 37; i++ {
			it := nextWithin(t, a, 1500)
			items = append(items, it)
			if it.Kind == stream.ItemEnd {
				ended = true
				break
			}
			c := map[string]uint64{it.Channel: it.Offset + uint64(len(it.Data))}
			if it.Kind == stream.ItemEvent {
				c = map[string]uint64{it.Channel: eventSeq(it.Data)}
			}
			if err := a.Ack(c); err != nil {
				t.Fatal(err)
			}
		}
		if !ended {
			sent := a.Sent()
			a.Cut(stream.End{Reason: stream.ReasonResume})
			a.Cut(stream.End{Reason: stream.ReasonClosed}) // the first cut counts
			it := nextWithin(t, a, 1500)
			if it.Kind != stream.ItemEnd || it.End.Reason != stream.ReasonResume {
				t.Fatalf("after Cut got %s", describe(it))
			}
			if it.Cursors["stdout"] != sent["stdout"] || it.Cursors["events"] != sent["events"] {
				t.Fatalf("cut cursors %v, sent %v", it.Cursors, sent)
			}
			from = it.Cursors
			cuts++
		}
		if _, err := a.Next(context.Background(), nil, 100); !errors.Is(err, io.EOF) {
			t.Fatalf("after end: %v", err)
		}
		a.Close()
		all = append(all, items...)
		if ended {
			break
		}
	}
	var data []stream.Item
	for _, it := range all {
		if it.Kind != stream.ItemEnd {
			data = append(data, it)
		}
	}
	if v, err := checkBytes(data, "stdout", 0, src); err != nil || v.gaps != 0 || v.cursor != uint64(len(src)) {
		t.Fatalf("stdout across %d cuts: %+v, %v", cuts, v, err)
	}
	if v, err := checkEvents(data, "events", 0); err != nil || v.gaps != 0 || v.cursor != 2000 {
		t.Fatalf("events across %d cuts: %+v, %v", cuts, v, err)
	}
	if cuts < 10 {
		t.Fatalf("only %d cuts", cuts)
	}
}

// TestCutWakesBlockedNext and ends an attachment whose window is full.
func TestCutWakesBlockedNext(t *testing.T) {
	s := newStream(t, 0, byteChan("stdout", stream.Drop, 100))
	s.Log("stdout").Write(make([]byte, 50))
	a, _ := s.Attach(nil, 10)
	defer a.Close()
	nextWithin(t, a, 100)
	got := make(chan stream.Item, 1)
	go func() {
		it, _ := a.Next(context.Background(), nil, 100)
		got <- it
	}()
	time.Sleep(50 * time.Millisecond)
	a.Cut(stream.End{Reason: stream.ReasonClosed})
	select {
	case it := <-got:
		if it.Kind != stream.ItemEnd || it.End.Reason != stream.ReasonClosed || it.Cursors["stdout"] != 10 {
			t.Fatalf("got %s", describe(it))
		}
	case <-time.After(waitLong):
		t.Fatal("Cut did not wake Next")
	}
	// A cut after the end changes nothing.
	a.Cut(stream.End{Reason: stream.ReasonResume})
	if _, err := a.Next(context.Background(), nil, 100); !errors.Is(err, io.EOF) {
		t.Fatalf("Next after end: %v", err)
	}
}
