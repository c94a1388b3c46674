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
	waitRuns := func(want int32) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for runs.Load() != want && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // ticks go on: the count must hold
		if got := runs.Load(); got != want {
			t.Fatalf("hook ran %d times, want %d", got, want)
		}
	}
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
