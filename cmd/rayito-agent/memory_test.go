package main

import (
	"strconv"
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

// TestMemoryGivenBackAfterRPCs: the garbage a large transfer over envd's
// process API leaves (a protobuf message per megabyte of input or chunk of
// output, the codec's pooled buffers) is given back once the transfer has
// gone quiet, not kept resident until the runtime's forced collection two
// minutes later. Anonymous memory only: the binary's code the RPCs paged in
// is not memory the agent holds.
func TestMemoryGivenBackAfterRPCs(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 192 MiB through an agent process")
	}
	a := startAgentProc(t)
	a.health(t)
	pc := processClient(a.addr)
	time.Sleep(time.Second)
	idle := a.anonymous(t)
	for range 2 {
		if n, code := connectRun(t, pc, startReq("head", "-c", strconv.Itoa(32<<20), "/dev/zero")); n != 32<<20 || code != 0 {
			t.Fatal(n, code)
		}
	}
	sendInput(t, pc, 128)
	anon := a.anonymous(t)
	bound := idle + 6<<10 // KiB
	deadline := time.Now().Add(20 * time.Second)
	for anon > bound {
		if time.Now().After(deadline) {
			t.Fatalf("anonymous memory %.1f MiB 20 s after the transfer (%.1f MiB idle), want at most %.1f MiB", mib(anon), mib(idle), mib(bound))
		}
		time.Sleep(200 * time.Millisecond)
		anon = a.anonymous(t)
	}
	t.Logf("idle %.1f MiB, after %.1f MiB", mib(idle), mib(anon))
}
