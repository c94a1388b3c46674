package traffic

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkSnapshot reads the traffic state (a /v1/traffic poll, an idle
// check) with no holds, the baseline, and with the most the agent keeps.
func BenchmarkSnapshot(b *testing.B) {
	for _, n := range []int{0, MaxHolds} {
		b.Run(fmt.Sprintf("holds=%d", n), func(b *testing.B) {
			c, _ := newFakeCounter()
			defer c.Close()
			for range n {
				if _, err := c.Holds().Lease(time.Hour, Owner{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for range b.N {
				if s := c.Snapshot(); len(s.Holds) != n {
					b.Fatal(len(s.Holds))
				}
			}
		})
	}
}

// BenchmarkCount is the hot path every websocket message takes; holds
// must not slow it, whatever their number.
func BenchmarkCount(b *testing.B) {
	for _, n := range []int{0, MaxHolds} {
		b.Run(fmt.Sprintf("holds=%d", n), func(b *testing.B) {
			c, _ := newFakeCounter()
			defer c.Close()
			for range n {
				c.Holds().Lease(time.Hour, Owner{})
			}
			b.ResetTimer()
			for range b.N {
				c.In(100)
			}
		})
	}
}
