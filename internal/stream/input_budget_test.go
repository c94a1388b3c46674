package stream_test

import (
	"bytes"
	"os"
	"sync"
	"testing"

	"github.com/rayito/rayito-agent/internal/stream"
)

// TestInputQueueInBudget: input a program does not read is charged to the
// retention budget like retained output, and given back the moment its
// program ends, not when its stream expires.
func TestInputQueueInBudget(t *testing.T) {
	reg := stream.NewRegistry(0)
	defer reg.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	in := stream.NewInput(w, w.Close, 0)
	in.ChargeTo(reg.Budget())
	chunk := bytes.Repeat([]byte("z"), 64<<10)
	for range 15 { // a pipe nobody reads takes 64 KiB; the rest queues
		if err := in.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	st := reg.Budget().Stats()
	if st.Input < 512<<10 || st.Used < st.Input {
		t.Fatalf("budget %+v: 960 KiB of input, most of it queued, is not charged", st)
	}
	// The program ends: as proc does, its stdin is closed, then the input
	// stopped.
	w.Close()
	in.Stop()
	if st := reg.Budget().Stats(); st.Input != 0 || st.Used != 0 {
		t.Fatalf("budget %+v after the program ended, want nothing charged", st)
	}
	if err := in.Write([]byte("x")); err == nil {
		t.Fatal("write after the end was taken")
	}
}

// TestInputReportsEverySubscriber: every connection subscribed is told
// the progress, each on its own; one that unsubscribed is told no more.
func TestInputReportsEverySubscriber(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() { // a reader that takes everything
		buf := make([]byte, 64<<10)
		for {
			if _, err := r.Read(buf); err != nil {
				return
			}
		}
	}()
	defer r.Close()
	in := stream.NewInput(w, w.Close, 0)
	defer in.Stop()
	var mu sync.Mutex
	got := map[string]uint64{}
	sub := func(name string) func(uint64, uint64) {
		return func(_, written uint64) {
			mu.Lock()
			got[name] = max(got[name], written)
			mu.Unlock()
		}
	}
	in.Subscribe("writer", sub("writer"))
	in.Subscribe("observer", sub("observer"))
	chunk := bytes.Repeat([]byte("z"), stream.InputProgressEvery)
	if err := in.WriteAt(0, chunk); err != nil {
		t.Fatal(err)
	}
	if !eventually(func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got["writer"] == stream.InputProgressEvery && got["observer"] == stream.InputProgressEvery
	}) {
		t.Fatalf("reports %v, want both subscribers told", got)
	}
	in.Unsubscribe("observer")
	if err := in.WriteAt(stream.InputProgressEvery, chunk); err != nil {
		t.Fatal(err)
	}
	if !eventually(func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got["writer"] == 2*stream.InputProgressEvery
	}) {
		t.Fatalf("reports %v, want the writer told of the second quarter", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if got["observer"] != stream.InputProgressEvery {
		t.Fatalf("reports after unsubscribing: %v", got)
	}
}
