package stream_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand"
	"sync"
	"testing"

	"github.com/rayito/rayito-agent/internal/stream"
)

// TestFinishDeliversEverythingThenOneEnd: every attachment, whether it was
// waiting, behind, or attached after the end, gets all the data, exactly
// one ItemEnd with the final cursors, then io.EOF on every later call.
func TestFinishDeliversEverythingThenOneEnd(t *testing.T) {
	checkNoLeak(t)
	src := randBytes(rand.New(rand.NewSource(30)), 20_000)
	s := newStream(t, 0, byteChan("stdout", stream.Drop, 1<<20), byteChan("stderr", stream.Drop, 1<<20), eventChan("events", stream.Drop, 100))
	var atts []*stream.Attachment
	for _, w := range []int{0, 1000, 256} {
		a, err := s.Attach(nil, w)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		atts = append(atts, a)
	}
	items := make([][]stream.Item, len(atts))
	errs := make([]error, len(atts))
	var wg sync.WaitGroup
	for k, a := range atts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			items[k], errs[k] = reader{a: a, maxChunk: 999, ack: ackDataOnly}.run(ctx)
		}()
	}
	for i := 0; i < len(src); i += 1000 {
		s.Log("stdout").Write(src[i : i+1000])
		s.Log("stderr").Write(src[len(src)-i-1000 : len(src)-i])
		s.Log("events").Append(func(seq uint64) []byte { return seqEvent(seq, 8) })
	}
	code := 3
	s.Finish(stream.End{Reason: stream.ReasonExit, ExitCode: &code, Signal: "SIGTERM"})
	other := 4
	s.Finish(stream.End{Reason: stream.ReasonExit, ExitCode: &other}) // only the first counts
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Finish")
	}
	if e := s.Ended(); e == nil || *e.ExitCode != 3 || e.Signal != "SIGTERM" {
		t.Fatalf("Ended = %+v", e)
	}
	late, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	lateItems, err := reader{a: late, maxChunk: 1 << 20}.run(ctx)
	wg.Wait()
	atts, items, errs = append(atts, late), append(items, lateItems), append(errs, err)

	rev := make([]byte, len(src))
	for i := 0; i < len(src); i += 1000 {
		copy(rev[i:i+1000], src[len(src)-i-1000:len(src)-i])
	}
	for k := range atts {
		if errs[k] != nil {
			t.Fatalf("attachment %d: %v", k, errs[k])
		}
		end, err := lastEnd(items[k])
		if err != nil {
			t.Fatalf("attachment %d: %v", k, err)
		}
		if end.End.Reason != stream.ReasonExit || *end.End.ExitCode != 3 {
			t.Fatalf("attachment %d: end %+v", k, end.End)
		}
		want := map[string]uint64{"stdout": 20_000, "stderr": 20_000, "events": 20}
		for ch, c := range want {
			if end.Cursors[ch] != c {
				t.Fatalf("attachment %d: end cursors %v, want %v", k, end.Cursors, want)
			}
		}
		for ch, data := range map[string][]byte{"stdout": src, "stderr": rev} {
			if v, err := checkBytes(items[k], ch, 0, data); err != nil || v.delivered != 20_000 {
				t.Fatalf("attachment %d %s: %+v, %v", k, ch, v, err)
			}
		}
		if v, err := checkEvents(items[k], "events", 0); err != nil || v.delivered != 20 {
			t.Fatalf("attachment %d events: %+v, %v", k, v, err)
		}
		for range 2 {
			if _, err := atts[k].Next(context.Background(), nil, 100); !errors.Is(err, io.EOF) {
				t.Fatalf("attachment %d after end: %v", k, err)
			}
		}
	}
}

// TestEndWaitsForWindow: the end comes after every item, so an attachment
// with a full window gets it only once it acknowledges.
func TestEndWaitsForWindow(t *testing.T) {
	s := newStream(t, 0, byteChan("stdout", stream.Drop, 1000))
	s.Log("stdout").Write(make([]byte, 300))
	a, _ := s.Attach(nil, 200)
	defer a.Close()
	s.Finish(stream.End{Reason: stream.ReasonClosed})
	nextWithin(t, a, 1000)
	expectIdle(t, a)
	a.Ack(map[string]uint64{"stdout": 100})
	if it := nextWithin(t, a, 1000); it.Offset != 200 || len(it.Data) != 100 {
		t.Fatalf("got %s", describe(it))
	}
	if it := nextWithin(t, a, 1000); it.Kind != stream.ItemEnd || it.Cursors["stdout"] != 300 {
		t.Fatalf("got %s", describe(it))
	}
}

func TestEndFields(t *testing.T) {
	code, count := 0, 7
	for _, tc := range []struct {
		end  stream.End
		want string
	}{
		{stream.End{Reason: stream.ReasonExit, ExitCode: &code}, `{"exit_code":0,"reason":"exit","signal":null}`},
		{stream.End{Reason: stream.ReasonExit, Signal: "SIGKILL"}, `{"exit_code":null,"reason":"exit","signal":"SIGKILL"}`},
		{stream.End{Reason: stream.ReasonDone, Status: "ok", ExecutionCount: &count}, `{"execution_count":7,"reason":"done","status":"ok"}`},
		{stream.End{Reason: stream.ReasonDone, Status: "aborted"}, `{"execution_count":null,"reason":"done","status":"aborted"}`},
		{stream.End{Reason: stream.ReasonClosed}, `{"reason":"closed"}`},
		{stream.End{Reason: stream.ReasonResume}, `{"reason":"resume"}`},
		{stream.End{Reason: stream.ReasonError, Message: "boom"}, `{"message":"boom","reason":"error"}`},
	} {
		got, err := json.Marshal(tc.end)
		if err != nil || string(got) != tc.want {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", tc.end, got, err, tc.want)
		}
	}
}
