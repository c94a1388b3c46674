package stream_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/rayito/rayito-agent/internal/stream"
)

// BenchmarkLogWriteRead measures throughput through a Block log with one
// attachment that acknowledges every item, as a connection does.
func BenchmarkLogWriteRead(b *testing.B) {
	for _, chunk := range []int{512, 32 << 10, 256 << 10} {
		b.Run(strconv.Itoa(chunk), func(b *testing.B) {
			r := stream.NewRegistry(0)
			defer r.Close()
			s := r.Create(stream.Config{Kind: stream.KindProcess, Channels: []stream.ChannelSpec{
				{Name: "stdout", Unit: stream.Bytes, Policy: stream.Block},
			}})
			a, err := s.Attach(nil, stream.DefaultWindow)
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			done := make(chan error, 1)
			go func() {
				buf := make([]byte, 0, 1<<20)
				for {
					it, err := a.Next(context.Background(), buf[:0], 1<<20)
					if err != nil {
						done <- nil
						return
					}
					if it.Kind == stream.ItemData {
						if err := a.Ack(map[string]uint64{"stdout": it.Offset + uint64(len(it.Data))}); err != nil {
							done <- err
							return
						}
					}
				}
			}()
			p := make([]byte, chunk)
			l := s.Log("stdout")
			b.SetBytes(int64(chunk))
			b.ResetTimer()
			for range b.N {
				if _, err := l.Write(p); err != nil {
					b.Fatal(err)
				}
			}
			s.Finish(stream.End{Reason: stream.ReasonClosed})
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkEventAppendNext measures events through a Block event log with
// one attachment acknowledging each event.
func BenchmarkEventAppendNext(b *testing.B) {
	r := stream.NewRegistry(0)
	defer r.Close()
	s := r.Create(stream.Config{Kind: stream.KindWatch, Channels: []stream.ChannelSpec{
		{Name: "events", Unit: stream.Events, Policy: stream.Block},
	}})
	a, err := s.Attach(nil, stream.DefaultWindow)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var n uint64
		for {
			it, err := a.Next(context.Background(), nil, 1)
			if err != nil {
				return
			}
			if it.Kind == stream.ItemEvent {
				n++
				a.Ack(map[string]uint64{"events": n})
			}
		}
	}()
	ev := []byte(`{"event":"create","path":"/tmp/x"}`)
	l := s.Log("events")
	b.ResetTimer()
	for range b.N {
		if _, err := l.Append(func(uint64) []byte { return ev }); err != nil {
			b.Fatal(err)
		}
	}
	s.Finish(stream.End{Reason: stream.ReasonClosed})
	<-done
}
