package stream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

// TestManyAttachmentsDifferentSpeeds: 19 clients at different speeds and
// one that never acknowledges share a Block stream. The stalled one holds
// at most its window in flight and delays nobody; every other one gets every byte
// as data equal to the source or inside a gap, then the end.
func TestManyAttachmentsDifferentSpeeds(t *testing.T) {
	checkNoLeak(t)
	const (
		total  = 512 << 10
		window = 4096
	)
	src := randBytes(rand.New(rand.NewSource(20)), total)
	s := newStream(t, 0, byteChan("stdout", stream.Block, 16<<10))
	var atts []*stream.Attachment
	for range 20 {
		a, err := s.Attach(nil, window)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		atts = append(atts, a)
	}
	stalledCtx, stopStalled := context.WithCancel(context.Background())
	defer stopStalled()
	type result struct {
		items []stream.Item
		err   error
	}
	results := make([]result, len(atts))
	var wg, stalledWG sync.WaitGroup
	for k, a := range atts {
		r := reader{a: a, maxChunk: 1024, ack: ackAll}
		ctx := context.Background()
		w := &wg
		if k == len(atts)-1 {
			r.ack, ctx, w = ackNever, stalledCtx, &stalledWG
		} else if k > 0 {
			pause := time.Duration(k) * 100 * time.Microsecond
			r.pause = func(int) { time.Sleep(pause) }
		}
		w.Add(1)
		go func() {
			defer w.Done()
			ctx, cancel := context.WithTimeout(ctx, 2*waitLong)
			defer cancel()
			results[k].items, results[k].err = r.run(ctx)
		}()
	}
	errc := writeRandom(s, s.Log("stdout"), src, 21, 5000)
	wg.Wait()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	for k, res := range results[:len(atts)-1] {
		if res.err != nil {
			t.Fatalf("reader %d: %v", k, res.err)
		}
		v, err := checkBytes(res.items, "stdout", 0, src)
		if err != nil {
			t.Fatalf("reader %d: %v", k, err)
		}
		end, err := lastEnd(res.items)
		if err != nil {
			t.Fatalf("reader %d: %v", k, err)
		}
		if v.cursor != total || v.delivered+v.gapped != total || end.Cursors["stdout"] != total {
			t.Fatalf("reader %d: view %+v, end %v", k, v, end.Cursors)
		}
	}
	if st := s.Log("stdout").Stats(); st.Lost != 0 {
		t.Fatalf("Block stream with clients attached lost data: %+v", st)
	}

	// The stalled client is still waiting for its window to reopen.
	stopStalled()
	stalledWG.Wait()
	stalled := results[len(atts)-1]
	if !errors.Is(stalled.err, context.Canceled) {
		t.Fatalf("stalled reader: %v after %s", stalled.err, describeAll(stalled.items))
	}
	for { // on a loaded machine it may not have caught up when cancelled
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		it, err := atts[len(atts)-1].Next(ctx, nil, 1024)
		cancel()
		if err != nil {
			break
		}
		stalled.items = append(stalled.items, it)
	}
	v, err := checkBytes(stalled.items, "stdout", 0, src)
	if err != nil {
		t.Fatal(err)
	}
	// Gapped positions were never sent, so each gap reopens the window;
	// between gaps it never sends more than the window.
	inflight := 0
	for _, it := range stalled.items {
		if it.Kind == stream.ItemGap {
			inflight = 0
		}
		if inflight += len(it.Data); inflight > window {
			t.Fatalf("client that never acknowledges has %d bytes in flight, window %d: %s", inflight, window, describeAll(stalled.items))
		}
	}
	if inflight != window {
		t.Fatalf("stalled client ended with %d bytes in flight, want its full window %d", inflight, window)
	}
	a := atts[len(atts)-1]
	a.Cut(stream.End{Reason: stream.ReasonClosed})
	if it := nextWithin(t, a, 1024); it.Kind != stream.ItemEnd || it.Cursors["stdout"] != v.cursor {
		t.Fatalf("cut of stalled reader: %s, want cursor %d", describe(it), v.cursor)
	}
}

// TestConcurrentWritersAndReaders: several goroutines write both channels
// of a Block stream while several clients read. One client (the only one
// that acknowledges, so the only one retention waits for) must see
// everything; the others, without a window, see a consistent
// subsequence of the same bytes, with gaps.
func TestConcurrentWritersAndReaders(t *testing.T) {
	checkNoLeak(t)
	const writers, chunks = 4, 200
	s := newStream(t, 0, byteChan("stdout", stream.Block, 3000), byteChan("stderr", stream.Block, 1000))
	var main *stream.Attachment
	var others []*stream.Attachment
	for k := range 4 {
		a, err := s.Attach(nil, []int{2000, 0, 0, 0}[k]) // only the first acknowledges
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		if k == 0 {
			main = a
		} else {
			others = append(others, a)
		}
	}
	want := map[string][]int{"stdout": make([]int, writers), "stderr": make([]int, writers)}
	var wwg sync.WaitGroup
	for w := range writers {
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			for range chunks {
				ch := []string{"stdout", "stderr"}[rng.Intn(2)]
				n := 1 + rng.Intn(1500)
				if _, err := s.Log(ch).Write(bytes.Repeat([]byte{byte(w)}, n)); err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				want[ch][w] += n // each writer owns its own counters
			}
		}()
	}
	go func() {
		wwg.Wait()
		s.Finish(exitEnd(0))
	}()

	results := make([][]stream.Item, len(others))
	errs := make([]error, len(others))
	var rwg sync.WaitGroup
	for k, a := range others {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*waitLong)
			defer cancel()
			r := reader{a: a, maxChunk: 700, pause: func(i int) {
				if i%3 == k {
					time.Sleep(time.Millisecond)
				}
			}}
			results[k], errs[k] = r.run(ctx)
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLong)
	defer cancel()
	items, err := reader{a: main, maxChunk: 900, ack: ackDataOnly}.run(ctx)
	if err != nil {
		t.Fatalf("main reader: %v", err)
	}
	rwg.Wait()
	if t.Failed() {
		return
	}
	full := map[string][]byte{}
	for _, it := range items {
		if it.Kind == stream.ItemData {
			full[it.Channel] = append(full[it.Channel], it.Data...)
		}
	}
	for ch, perWriter := range want {
		v, err := checkBytes(items, ch, 0, full[ch])
		if err != nil || v.gaps != 0 {
			t.Fatalf("main reader %s: %+v, %v", ch, v, err)
		}
		got := make([]int, writers)
		for _, b := range full[ch] {
			got[b]++
		}
		if fmt.Sprint(got) != fmt.Sprint(perWriter) {
			t.Fatalf("%s: bytes per writer %v, written %v", ch, got, perWriter)
		}
	}
	for k, res := range results {
		if errs[k] != nil {
			t.Fatalf("reader %d: %v", k, errs[k])
		}
		if _, err := lastEnd(res); err != nil {
			t.Fatalf("reader %d: %v", k, err)
		}
		for ch := range want {
			v, err := checkBytes(res, ch, 0, full[ch])
			if err != nil || v.cursor != uint64(len(full[ch])) {
				t.Fatalf("reader %d %s: %+v, %v", k, ch, v, err)
			}
		}
	}
}

// TestConcurrentAppends: seqs handed to concurrent appenders are unique,
// contiguous from 1, and readers get each event under its own seq.
func TestConcurrentAppends(t *testing.T) {
	checkNoLeak(t)
	const appenders, each = 4, 500
	s := newStream(t, 0, eventChan("events", stream.Block, 20))
	a, err := s.Attach(nil, 256*7)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	seqs := make([][]uint64, appenders)
	var wg sync.WaitGroup
	for w := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				seq, err := s.Log("events").Append(func(seq uint64) []byte {
					ev := seqEvent(seq, 16)
					ev[8], ev[9] = byte(w), byte(i%256)
					return ev
				})
				if err != nil {
					t.Errorf("append: %v", err)
					return
				}
				seqs[w] = append(seqs[w], seq)
			}
		}()
	}
	go func() {
		wg.Wait()
		s.Finish(stream.End{Reason: stream.ReasonClosed})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLong)
	defer cancel()
	items, err := reader{a: a, ack: ackDataOnly}.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, err := checkEvents(items, "events", 0)
	if err != nil || v.gaps != 0 || v.cursor != appenders*each {
		t.Fatalf("view %+v, %v", v, err)
	}
	bySeq := map[uint64][2]byte{}
	for _, it := range items {
		if it.Kind == stream.ItemEvent {
			bySeq[eventSeq(it.Data)] = [2]byte{it.Data[8], it.Data[9]}
		}
	}
	for w, list := range seqs {
		for i, seq := range list {
			if i > 0 && seq <= list[i-1] {
				t.Fatalf("appender %d got seq %d after %d", w, seq, list[i-1])
			}
			if bySeq[seq] != [2]byte{byte(w), byte(i % 256)} {
				t.Fatalf("seq %d carries %v, appended by %d as #%d", seq, bySeq[seq], w, i)
			}
		}
	}
}
