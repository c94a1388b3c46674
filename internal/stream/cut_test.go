package stream_test

import (
	"bytes"
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

// TestCutAfterDeliversWhatWasWritten: CutAfter ends the attachment only
// once everything written before the cut has been handed out, on every
// channel, and nothing written after it.
func TestCutAfterDeliversWhatWasWritten(t *testing.T) {
	checkNoLeak(t)
	s := newStream(t, 0, byteChan("stdout", stream.Block, 1<<20), byteChan("stderr", stream.Block, 1<<20), eventChan("events", stream.Block, 50))
	a, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	out := randBytes(rand.New(rand.NewSource(3)), 100_000)
	s.Log("stdout").Write(out)
	s.Log("stderr").Write([]byte("err"))
	for range 3 {
		s.Log("events").Append(func(seq uint64) []byte { return seqEvent(seq, 8) })
	}
	a.CutAfter(stream.End{Reason: stream.ReasonResume})
	a.Cut(stream.End{Reason: stream.ReasonClosed}) // the first cut counts
	s.Log("stdout").Write([]byte("after the cut"))

	var got []byte
	var errBytes, events int
	for {
		it := nextWithin(t, a, 4096)
		if it.Kind == stream.ItemEnd {
			if it.End.Reason != stream.ReasonResume {
				t.Fatalf("end %+v, want the cut's", it.End)
			}
			if it.Cursors["stdout"] != uint64(len(out)) || it.Cursors["stderr"] != 3 || it.Cursors["events"] != 3 {
				t.Fatalf("end cursors %v", it.Cursors)
			}
			break
		}
		switch it.Channel {
		case "stdout":
			got = append(got, it.Data...)
		case "stderr":
			errBytes += len(it.Data)
		case "events":
			events++
		}
	}
	if !bytes.Equal(got, out) || errBytes != 3 || events != 3 {
		t.Fatalf("got %d stdout bytes (equal %v), %d stderr, %d events", len(got), bytes.Equal(got, out), errBytes, events)
	}
}

// TestCutAfterWaitsForWindow: a windowed attachment reaches its cut only
// as the client acknowledges; the cut does not skip what is in flight.
func TestCutAfterWaitsForWindow(t *testing.T) {
	checkNoLeak(t)
	s := newStream(t, 0, byteChan("stdout", stream.Block, 1<<20))
	a, err := s.Attach(nil, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s.Log("stdout").Write(make([]byte, 2500))
	a.CutAfter(stream.End{Reason: stream.ReasonResume})
	var cursor uint64
	for {
		it := nextWithin(t, a, 4096)
		if it.Kind == stream.ItemEnd {
			break
		}
		if it.Kind != stream.ItemData || it.Offset != cursor {
			t.Fatalf("got %s at cursor %d", describe(it), cursor)
		}
		cursor += uint64(len(it.Data))
		if cursor < 2500 {
			expectIdle(t, a) // the window is full until the ack
		}
		if err := a.Ack(map[string]uint64{"stdout": cursor}); err != nil {
			t.Fatal(err)
		}
	}
	if cursor != 2500 {
		t.Fatalf("ended at %d of 2500", cursor)
	}
}

// TestCutAfterEndedStream: a stream that ended before the cut ends its
// attachments with its own end, after all of its output.
func TestCutAfterEndedStream(t *testing.T) {
	checkNoLeak(t)
	s := newStream(t, 0, byteChan("stdout", stream.Block, 1<<20))
	a, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s.Log("stdout").Write([]byte("last words"))
	s.Finish(exitEnd(4))
	a.CutAfter(stream.End{Reason: stream.ReasonResume})
	if it := nextWithin(t, a, 4096); it.Kind != stream.ItemData || string(it.Data) != "last words" {
		t.Fatalf("got %s", describe(it))
	}
	if it := nextWithin(t, a, 4096); it.Kind != stream.ItemEnd || it.End.Reason != stream.ReasonExit || *it.End.ExitCode != 4 {
		t.Fatalf("got %s", describe(it))
	}
}
