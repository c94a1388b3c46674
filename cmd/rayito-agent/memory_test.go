package main

import (
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// TestMemoryGivenBack: after a burst of output that its clients read to
// the end, the agent (the real binary, in a process of its own) gives the
// memory back: its resident memory returns to near where it started. The
// margin is wide (the goal is 20 MiB, idle is about 10), so that a busy
// machine cannot make it fail; an agent that keeps what it read fails.
func TestMemoryGivenBack(t *testing.T) {
	a := startAgentProc(t)
	a.health(t)
	c := a.dial(t)
	time.Sleep(time.Second)
	idle, _ := a.memory(t)
	burst(t, []*client.Client{c}, 6, 64<<20)
	rss, peak := a.memory(t)
	bound := idle + 16<<10 // KiB
	deadline := time.Now().Add(30 * time.Second)
	for rss > bound {
		if time.Now().After(deadline) {
			t.Fatalf("resident memory %.1f MiB 30 s after the burst (%.1f MiB idle, %.1f MiB at the peak), want at most %.1f MiB",
				mib(rss), mib(idle), mib(peak), mib(bound))
		}
		time.Sleep(200 * time.Millisecond)
		rss, _ = a.memory(t)
	}
	t.Logf("idle %.1f MiB, peak %.1f MiB, after %.1f MiB", mib(idle), mib(peak), mib(rss))
}
