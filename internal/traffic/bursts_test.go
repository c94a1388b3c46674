package traffic

import (
	"sync/atomic"
	"testing"
	"time"
)

// The hook runs once after a burst of at least MinBytes has gone quiet:
// not for less traffic, not while bytes still cross, not again without a
// new burst.
func TestBurstHookRunsOncePerEndedBurst(t *testing.T) {
	c, clock := newFakeCounter()
	c.In(100) // before the watch: not part of any burst
	var runs atomic.Int32
	w := watchBursts(c, Burst{MinBytes: 1000, Quiet: time.Second}, 5*time.Millisecond, func() { runs.Add(1) })
	defer w.Close()
	waitRuns := func(want int32) { t.Helper(); waitHookRuns(t, &runs, want) }
	c.In(900)
	clock.Advance(time.Minute)
	waitRuns(0) // 900 bytes are no burst, however quiet
	c.Out(100)  // 1,000 now, but the last byte just crossed
	waitRuns(0)
	clock.Advance(999 * time.Millisecond)
	waitRuns(0)
	clock.Advance(time.Millisecond)
	waitRuns(1)
	clock.Advance(time.Hour)
	waitRuns(1) // no new burst, no new run
	c.Out(999)
	clock.Advance(time.Minute)
	waitRuns(1)
	c.In(1)
	clock.Advance(time.Second)
	waitRuns(2)
}

// TestBurstWatcherSleepsWhileQuiet: once the endpoint is quiet the watcher
// stops ticking until the next counted byte (an idle agent is not woken
// for it), and that byte wakes it.
func TestBurstWatcherSleepsWhileQuiet(t *testing.T) {
	c, clock := newFakeCounter()
	var runs atomic.Int32
	w := watchBursts(c, Burst{MinBytes: 1000, Quiet: time.Second}, time.Millisecond, func() { runs.Add(1) })
	defer w.Close()
	clock.Advance(time.Minute)
	settled := func() int64 {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; {
			n := w.checks.Load()
			time.Sleep(50 * time.Millisecond) // fifty ticks, were it ticking
			if w.checks.Load() == n {
				return n
			}
			if time.Now().After(deadline) {
				t.Fatal("the watcher goes on ticking while nothing crosses")
			}
		}
	}
	n := settled()
	c.In(2000) // wakes it; quiet comes a second later
	for deadline := time.Now().Add(5 * time.Second); w.checks.Load() < n+5; {
		if time.Now().After(deadline) {
			t.Fatal("a counted byte did not wake the watcher")
		}
		time.Sleep(time.Millisecond)
	}
	if runs.Load() != 0 {
		t.Fatal("hook ran before the burst went quiet")
	}
	clock.Advance(time.Second)
	for deadline := time.Now().Add(5 * time.Second); runs.Load() != 1; {
		if time.Now().After(deadline) {
			t.Fatal("the burst's hook did not run")
		}
		time.Sleep(time.Millisecond)
	}
	settled()
}
