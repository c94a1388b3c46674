package traffic

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/traffic/traffictest"
)

func newFakeCounter() (*Counter, *traffictest.Clock) {
	clock := traffictest.NewClock()
	return NewCounterWithClock(clock), clock
}

func TestCounts(t *testing.T) {
	c, clock := newFakeCounter()
	c.In(10)
	clock.Advance(3 * time.Second)
	c.Out(25)
	c.ConnOpened()
	s := c.Snapshot()
	if s.BytesIn != 10 || s.BytesOut != 25 || s.Connections != 1 || s.IdleMs != 0 {
		t.Fatalf("%+v", s)
	}
	if s.LastActivityUnixMs != clock.Now().UnixMilli() {
		t.Fatalf("last activity %d, want %d", s.LastActivityUnixMs, clock.Now().UnixMilli())
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
	for _, bad := range []int64{MaxIdleSeconds + 1, 1 << 62} {
		if err := c.SetMaxIdle(bad); !errors.Is(err, ErrIdleTooLong) {
			t.Errorf("SetMaxIdle(%d) = %v", bad, err)
		}
	}
	if err := c.SetMaxIdle(MaxIdleSeconds); err != nil {
		t.Fatal(err)
	}
	if err := c.SetMaxIdle(60); err != nil {
		t.Fatal(err)
	}
	clock.Advance(59 * time.Second)
	if c.Snapshot().Idle {
		t.Fatal("idle after 59 s of a 60 s policy")
	}
	clock.Advance(time.Second)
	if s := c.Snapshot(); !s.Idle || s.IdleMs != 60000 || s.IdlePolicy.MaxIdleSeconds != 60 {
		t.Fatalf("not idle after 60 s: %+v", s)
	}
	c.In(1)
	if c.Snapshot().Idle {
		t.Fatal("a counted byte did not end idleness")
	}
	clock.Advance(2 * time.Minute)
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
	waitRuns := func(want int32) { waitHookRuns(t, &runs, want) }
	waitRuns(0)
	clock.Advance(61 * time.Second)
	waitRuns(1)
	clock.Advance(10 * time.Minute)
	waitRuns(1)
	c.Out(5) // activity, then idle again
	waitRuns(1)
	clock.Advance(61 * time.Second)
	waitRuns(2)
}

// The host sets the wall clock after a resume, often after the resume
// already reset the idle clock: a step forward by the time the sandbox was
// suspended must not make it idle (and run the hook) at once, and a step
// back must not keep it awake.
func TestWallClockStepIsNotIdleTime(t *testing.T) {
	c, clock := newFakeCounter()
	c.SetMaxIdle(60)
	c.Touch() // the resume
	clock.Step(3 * time.Hour)
	if s := c.Snapshot(); s.Idle || s.IdleMs != 0 {
		t.Fatalf("a wall clock step forward counted as idle time: %+v", s)
	}
	clock.Advance(30 * time.Second)
	c.In(3)
	clock.Step(-5 * time.Hour)
	clock.Advance(61 * time.Second)
	if s := c.Snapshot(); !s.Idle || s.IdleMs != 61000 {
		t.Fatalf("not idle 61 s after the last byte, across a step back: %+v", s)
	}
}

// Counters and the idle clock never go backwards, whatever callers pass
// and however they race.
func TestCountersNeverGoBackwards(t *testing.T) {
	c, clock := newFakeCounter()
	c.In(5)
	c.Out(7)
	c.In(-3)
	c.Out(-1 << 40)
	if s := c.Snapshot(); s.BytesIn != 5 || s.BytesOut != 7 {
		t.Fatalf("negative counts changed the counters: %+v", s)
	}
	c.SetMaxIdle(60)
	clock.Advance(61 * time.Second)
	c.In(0) // no byte: not activity
	if !c.Snapshot().Idle {
		t.Fatal("an empty message reset the idle clock")
	}

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				clock.Advance(time.Millisecond)
				c.In(1)
				c.Out(2)
			}
		})
	}
	var prev Snapshot
	for range 2000 {
		s := c.Snapshot()
		if s.BytesIn < prev.BytesIn || s.BytesOut < prev.BytesOut {
			t.Fatalf("counters went backwards: %+v after %+v", s, prev)
		}
		prev = s
	}
	close(stop)
	wg.Wait()
	before := c.lastMono.Load()
	// A caller that read the clock before another one stored a later time.
	stale := before - int64(time.Second)
	storeMax(&c.lastMono, stale)
	if c.lastMono.Load() != before {
		t.Fatalf("a late store moved the idle clock back: %d to %d (stale %d)", before, c.lastMono.Load(), stale)
	}
}

// A hook that hangs does not stop counting nor the watcher, and the next
// idle period gets its own run.
func TestHangingHookBlocksNothing(t *testing.T) {
	c, clock := newFakeCounter()
	c.SetMaxIdle(60)
	release := make(chan struct{})
	var runs atomic.Int32
	w := watchIdle(c, 5*time.Millisecond, func(Snapshot) {
		runs.Add(1)
		<-release
	})
	defer func() {
		close(release)
		w.Close()
	}()
	clock.Advance(61 * time.Second)
	waitFor(t, func() bool { return runs.Load() == 1 })
	c.In(10)
	if s := c.Snapshot(); s.BytesIn != 10 || s.Idle {
		t.Fatalf("counting while the hook hangs: %+v", s)
	}
	// The watcher must see the activity between the idle periods; on a
	// loaded machine it may miss a short one, so try again until it ran.
	deadline := time.Now().Add(10 * time.Second)
	for runs.Load() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("hook ran %d times over two idle periods", runs.Load())
		}
		c.In(1)
		time.Sleep(50 * time.Millisecond)
		clock.Advance(61 * time.Second)
		time.Sleep(50 * time.Millisecond)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitHookRuns waits until a watcher's hook ran want times, then a little
// longer: the watcher ticks on, and the count must hold.
func waitHookRuns(t *testing.T, runs *atomic.Int32, want int32) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runs.Load() != want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if got := runs.Load(); got != want {
		t.Fatalf("hook ran %d times, want %d", got, want)
	}
}
