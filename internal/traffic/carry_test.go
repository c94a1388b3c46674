package traffic

import (
	"testing"
	"time"
)

// TestCarryKeepsTheCountsAndTheIdleClock: a counter that adopts another's
// reports the same bytes, and an idle time that goes on from where the
// other's was, plus the handover's own time.
func TestCarryKeepsTheCountsAndTheIdleClock(t *testing.T) {
	old, clock := newFakeCounter()
	defer old.Close()
	old.SetMaxIdle(60)
	old.In(100)
	old.Out(250)
	clock.Advance(7 * time.Second)
	k := old.Carry()

	fresh, clock2 := newFakeCounter()
	clock2.Advance(time.Hour) // the new counter's clock has another origin
	defer fresh.Close()
	k.AtUnixNs = clock2.Now().Add(-300 * time.Millisecond).UnixNano()
	fresh.Adopt(k)
	s := fresh.Snapshot()
	if s.BytesIn != 100 || s.BytesOut != 250 || s.IdleMs != 7300 || s.IdlePolicy == nil || s.IdlePolicy.MaxIdleSeconds != 60 {
		t.Fatalf("after the handover: %+v (policy %+v), want 100 in, 250 out, idle 7300 ms, max idle 60", s, s.IdlePolicy)
	}
}
