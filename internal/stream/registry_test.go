package stream_test

import (
	"sync"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

// eventually polls cond until it holds or waitLong passes.
func eventually(cond func() bool) bool {
	deadline := time.Now().Add(waitLong)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// TestRegistrySweep: ended streams are forgotten after keep, not before,
// and not while attached; running streams never; ids are never reused.
func TestRegistrySweep(t *testing.T) {
	checkNoLeak(t)
	const keep = 150 * time.Millisecond
	r := stream.NewRegistry(keep)
	defer r.Close()
	running := r.Create(stream.Config{Kind: stream.KindProcess})
	ended := r.Create(stream.Config{Kind: stream.KindProcess})
	held := r.Create(stream.Config{Kind: stream.KindWatch})
	base := running.ID - 1
	if ended.ID != base+2 || held.ID != base+3 {
		t.Fatalf("ids %d %d %d, want consecutive", running.ID, ended.ID, held.ID)
	}
	a, err := held.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	finished := time.Now()
	ended.Finish(exitEnd(0))
	held.Finish(stream.End{Reason: stream.ReasonClosed})
	if r.Get(base+2) != ended {
		t.Fatal("ended stream forgotten at once")
	}
	if !eventually(func() bool { return r.Get(base+2) == nil }) {
		t.Fatal("ended stream never forgotten")
	}
	if d := time.Since(finished); d < keep {
		t.Fatalf("ended stream forgotten %v after its end, keep is %v", d, keep)
	}
	time.Sleep(2 * keep)
	if r.Get(base+3) != held || r.Get(base+1) != running {
		t.Fatal("swept an attached or a running stream")
	}
	a.Close()
	if !eventually(func() bool { return r.Get(base+3) == nil }) {
		t.Fatal("ended stream not forgotten after its last detach")
	}
	if r.Get(base+1) != running {
		t.Fatal("swept a running stream")
	}
	if s := r.Create(stream.Config{}); s.ID != base+4 {
		t.Fatalf("id after sweeping %d, want %d (never reused)", s.ID, base+4)
	}
	if l := r.List(""); len(l) != 2 || l[0].ID != base+1 || l[1].ID != base+4 {
		t.Fatalf("List after sweep: %d streams", len(l))
	}
	r.Close()
	r.Close() // harmless
	if r.Get(base+1) != running {
		t.Fatal("Close made streams unreadable")
	}
}

func TestRegistryListAndFind(t *testing.T) {
	r := stream.NewRegistry(0)
	defer r.Close()
	mk := func(kind stream.Kind, pid int, tag string) *stream.Stream {
		return r.Create(stream.Config{Kind: kind, Pid: pid, Tag: tag, Argv: []string{"x"}})
	}
	p1 := mk(stream.KindProcess, 100, "build")
	mk(stream.KindWatch, 0, "")
	p2 := mk(stream.KindProcess, 200, "build")
	pty := mk(stream.KindPTY, 300, "shell")
	p3 := mk(stream.KindProcess, 100, "test") // pid reused by the OS
	if p1.Kind != stream.KindProcess || p1.Pid != 100 || p1.Tag != "build" || p1.Argv[0] != "x" || p1.Created.IsZero() {
		t.Fatalf("stream fields %+v", p1)
	}
	ids := func(l []*stream.Stream) []uint64 {
		var out []uint64
		for _, s := range l {
			out = append(out, s.ID-p1.ID+1) // 1 for the first
		}
		return out
	}
	for kind, want := range map[stream.Kind][]uint64{"": {1, 2, 3, 4, 5}, stream.KindProcess: {1, 3, 5}, stream.KindWatch: {2}, stream.KindCell: nil} {
		if got := ids(r.List(kind)); len(got) != len(want) || (len(got) > 0 && got[len(got)-1] != want[len(want)-1]) {
			t.Fatalf("List(%q) = %v, want %v", kind, got, want)
		}
		for i, id := range ids(r.List(kind)) {
			if id != want[i] {
				t.Fatalf("List(%q) = %v, want %v", kind, ids(r.List(kind)), want)
			}
		}
	}
	check := func(pid int, tag string, want *stream.Stream) {
		t.Helper()
		if got := r.Find(pid, tag); got != want {
			t.Fatalf("Find(%d, %q) = %v, want %v", pid, tag, got, want)
		}
	}
	check(100, "", p3)    // newest
	check(0, "build", p2) // newest
	check(100, "build", p1)
	check(300, "shell", pty)
	check(100, "shell", nil)
	check(999, "", nil)
	check(0, "nope", nil)
	p3.Finish(exitEnd(0))
	check(100, "", p1) // running preferred
	p2.Finish(exitEnd(0))
	check(0, "build", p1)
	p1.Finish(exitEnd(1))
	check(100, "", p3) // all ended: newest
	check(0, "build", p2)
}

func TestRegistryConcurrentCreate(t *testing.T) {
	r := stream.NewRegistry(0)
	defer r.Close()
	const goroutines, each = 8, 200
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				s := r.Create(stream.Config{Kind: stream.KindProcess})
				if r.Get(s.ID) != s {
					t.Errorf("Get(%d) is not the created stream", s.ID)
				}
				mu.Lock()
				if seen[s.ID] {
					t.Errorf("id %d handed out twice", s.ID)
				}
				seen[s.ID] = true
				mu.Unlock()
				if i%20 == 0 {
					r.List("")
					r.Find(0, "x")
				}
			}
		}()
	}
	wg.Wait()
	first := r.Create(stream.Config{}).ID - goroutines*each
	for id := first; id < first+goroutines*each; id++ {
		if !seen[id] {
			t.Fatalf("id %d skipped", id)
		}
	}
}

// TestRegistryCloseConcurrent: shutdown paths may close the registry from
// two goroutines at once; that must be as harmless as closing twice.
func TestRegistryCloseConcurrent(t *testing.T) {
	checkNoLeak(t)
	for i := 0; i < 5000 && !t.Failed(); i++ {
		r := stream.NewRegistry(0)
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("concurrent Close panicked: %v", p)
					}
				}()
				r.Close()
			}()
		}
		wg.Wait()
	}
}
