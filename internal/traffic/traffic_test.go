package traffic

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeNow is a settable clock, so a 60 s idle policy can be tested
// without waiting a minute.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeNow) advance(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

func newFakeCounter() (*Counter, *fakeNow) {
	clock := &fakeNow{t: time.Unix(1_800_000_000, 0)}
	c := &Counter{now: clock.now}
	c.last.Store(clock.now().UnixNano())
	return c, clock
}

func TestCounts(t *testing.T) {
	c, clock := newFakeCounter()
	c.In(10)
	clock.advance(3 * time.Second)
	c.Out(25)
	c.ConnOpened()
	s := c.Snapshot()
	if s.BytesIn != 10 || s.BytesOut != 25 || s.Connections != 1 || s.IdleMs != 0 {
		t.Fatalf("%+v", s)
	}
	if s.LastActivityUnixMs != clock.now().UnixMilli() {
		t.Fatalf("last activity %d, want %d", s.LastActivityUnixMs, clock.now().UnixMilli())
	}
	if s.IdlePolicy != nil || s.Idle {
		t.Fatalf("idle without a policy: %+v", s)
	}
}

func TestIdlePolicy(t *testing.T) {
	c, clock := newFakeCounter()
	for _, bad := range []int64{-1, 1, 59} {
		if err := c.SetMaxIdle(bad); !errors.Is(err, ErrIdleTooShort) {
			t.Errorf("SetMaxIdle(%d) = %v", bad, err)
		}
	}
	if err := c.SetMaxIdle(60); err != nil {
		t.Fatal(err)
	}
	clock.advance(59 * time.Second)
	if c.Snapshot().Idle {
		t.Fatal("idle after 59 s of a 60 s policy")
	}
	clock.advance(time.Second)
	if s := c.Snapshot(); !s.Idle || s.IdleMs != 60000 || s.IdlePolicy.MaxIdleSeconds != 60 {
		t.Fatalf("not idle after 60 s: %+v", s)
	}
	c.In(1)
	if c.Snapshot().Idle {
		t.Fatal("a counted byte did not end idleness")
	}
	clock.advance(2 * time.Minute)
	c.Touch()
	if c.Snapshot().Idle {
		t.Fatal("Touch (a resume) did not reset the idle clock")
	}
}

func TestIdleHookRunsOncePerIdlePeriod(t *testing.T) {
	c, clock := newFakeCounter()
	c.SetMaxIdle(60)
	var runs atomic.Int32
	w := watchIdle(c, 5*time.Millisecond, func(s Snapshot) {
		if !s.Idle {
			t.Error("hook called with a snapshot that is not idle")
		}
		runs.Add(1)
	})
	defer w.Close()
	waitRuns := func(want int32) {
		deadline := time.Now().Add(5 * time.Second)
		for runs.Load() != want && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // ticks go on: the count must hold
		if got := runs.Load(); got != want {
			t.Fatalf("hook ran %d times, want %d", got, want)
		}
	}
	waitRuns(0)
	clock.advance(61 * time.Second)
	waitRuns(1)
	clock.advance(10 * time.Minute)
	waitRuns(1)
	c.Out(5) // activity, then idle again
	waitRuns(1)
	clock.advance(61 * time.Second)
	waitRuns(2)
}
