package watch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/stream"
)

// benchWatch starts a recursive watch on a fresh directory and attaches to
// it without a window. The directory is on tmpfs when there is one, so that
// the disk's speed at creating files matters less.
func benchWatch(b *testing.B) (*Manager, string, *stream.Attachment) {
	b.Helper()
	reg := stream.NewRegistry(0)
	b.Cleanup(reg.Close)
	m := NewManager(reg, zap.NewNop())
	b.Cleanup(func() { m.Close() })
	root, err := os.MkdirTemp("/dev/shm", "watch-bench")
	if err != nil {
		root = b.TempDir()
	} else {
		b.Cleanup(func() { os.RemoveAll(root) })
	}
	s, err := m.Watch(root, true)
	if err != nil {
		b.Fatal(err)
	}
	a, err := s.Attach(nil, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(a.Close)
	return m, root, a
}

// nextEvent returns the next item of a, acknowledging it.
func nextEvent(b *testing.B, a *stream.Attachment) (stream.Item, fsEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	item, err := a.Next(ctx, nil, 1<<20)
	if err != nil {
		b.Fatal(err)
	}
	var ev fsEvent
	switch item.Kind {
	case stream.ItemEvent:
		e, err := DecodeEvent(item.Data)
		if err != nil {
			b.Fatal(err)
		}
		ev = fsEvent{Event: "fs", Seq: item.Offset, Op: e.Op.String(), Path: e.Path, Dir: e.Dir}
		a.Ack(map[string]uint64{Channel: ev.Seq})
	case stream.ItemGap:
		a.Ack(map[string]uint64{Channel: item.To - 1})
	case stream.ItemEnd:
		b.Fatalf("stream ended: %+v", item.End)
	}
	return item, ev
}

// BenchmarkCreateBurst creates b.N files as fast as one goroutine can and
// measures the rate at which their events reach a reader. Events the
// kernel or the stream had to drop are reported as lost.
func BenchmarkCreateBurst(b *testing.B) {
	_, root, a := benchWatch(b)
	end := filepath.Join(root, "end")
	done := make(chan struct{})
	defer close(done)
	b.ResetTimer()
	start := time.Now()
	go func() {
		for i := range b.N {
			if f, err := os.Create(filepath.Join(root, fmt.Sprintf("f%d", i))); err == nil {
				f.Close()
			}
		}
		// The end marker's event can be lost in an overflow too: repeat it.
		for {
			os.Remove(end)
			if f, err := os.Create(end); err == nil {
				f.Close()
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	received := 0
	for {
		item, ev := nextEvent(b, a)
		if item.Kind == stream.ItemGap {
			continue
		}
		if ev.Path == end {
			break
		}
		if ev.Op == "create" {
			received++
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(received)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(b.N-received), "lost")
}

// BenchmarkRouting measures the agent alone: files are created while the
// manager is stalled (in batches the kernel queue holds), and only the
// time to route their queued events to a reader is counted.
func BenchmarkRouting(b *testing.B) {
	m, root, a := benchWatch(b)
	const batch = 8192
	var routed time.Duration
	b.ResetTimer()
	b.StopTimer()
	for done := 0; done < b.N; {
		n := min(batch, b.N-done)
		resume := m.Stall()
		for i := range n {
			if f, err := os.Create(filepath.Join(root, fmt.Sprintf("f%d", done+i))); err == nil {
				f.Close()
			}
		}
		last := filepath.Join(root, fmt.Sprintf("f%d", done+n-1))
		start := time.Now()
		b.StartTimer()
		resume()
		for {
			if _, ev := nextEvent(b, a); ev.Path == last || ev.Op == "overflow" {
				break
			}
		}
		b.StopTimer()
		routed += time.Since(start)
		done += n
	}
	b.ReportMetric(float64(b.N)/routed.Seconds(), "events/s")
}

// BenchmarkCreateToEvent measures the delay from a file's creation to its
// event reaching a reader, one file at a time.
func BenchmarkCreateToEvent(b *testing.B) {
	_, root, a := benchWatch(b)
	delays := make([]time.Duration, 0, b.N)
	i := 0
	for b.Loop() {
		path := filepath.Join(root, fmt.Sprintf("f%d", i))
		i++
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		created := time.Now()
		f.Close()
		for {
			if _, ev := nextEvent(b, a); ev.Path == path {
				break
			}
		}
		delays = append(delays, time.Since(created))
	}
	slices.Sort(delays)
	pct := func(p float64) float64 { return float64(delays[int(p*float64(len(delays)-1))].Microseconds()) }
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}
