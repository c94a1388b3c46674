package endpoint

import (
	"github.com/rayito/rayito-agent/internal/surface/surfacetest"
	"runtime"
	"strconv"
	"sync"
	"testing"
)

// metric reads one unlabelled value from /metrics.
func (a *testAgent) metric(t *testing.T, name string) float64 {
	t.Helper()
	return surfacetest.Metric(t, a.http.URL, testToken, name)
}

// /metrics says how much the streams retain for clients and how large
// the live heap is: a soak tells a leak from retention with them.
func TestMetricsMemory(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	before := a.metric(t, "rayito_stream_retained_bytes")
	const printed = 100000
	stream := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"head", "-c", strconv.Itoa(printed), "/dev/zero"}}))
	if out, end := rc.collect(stream); len(out["stdout"]) != printed || end["exit_code"] != 0.0 {
		t.Fatalf("exec: %d bytes, end %v", len(out["stdout"]), end)
	}
	// The ended stream keeps its output for later attaches, in chunks
	// that grew four times at a step up to 256 KiB (4+16+64+256 KiB for
	// 100,000 bytes) and stderr's first 4 KiB chunk.
	const chunked = (4 + 16 + 64 + 256 + 4) << 10
	if got := a.metric(t, "rayito_stream_retained_bytes"); got < before+printed || got > before+chunked {
		t.Errorf("retained %.0f bytes after a command printed %d, %.0f before", got, printed, before)
	}

	// The live heap is the whole test binary's, which other tests share:
	// it holds at least what this test keeps reachable.
	const held = 64 << 20
	keep := make([]byte, held)
	runtime.GC()
	if got := a.metric(t, "go_gc_heap_live_bytes"); got < held {
		t.Errorf("live heap %.0f bytes while %d are held", got, held)
	}
	runtime.KeepAlive(keep)

	// Stacks are outside the heap: 1,000 parked goroutines each hold a
	// stack grown past 16 KiB. (So large that the stacks of other tests'
	// goroutines, which come and go meanwhile, cannot hide them.)
	stacks := a.metric(t, "go_memstats_stack_inuse_bytes")
	park := make(chan struct{})
	var started sync.WaitGroup
	for range 1000 {
		started.Add(1)
		go parkDeep(park, &started)
	}
	started.Wait()
	if got := a.metric(t, "go_memstats_stack_inuse_bytes"); got < stacks+1000*(16<<10) {
		t.Errorf("stacks %.0f bytes with 1,000 goroutines more, %.0f before", got, stacks)
	}
	close(park)
}

// parkDeep parks until park closes, on a stack grown past 16 KiB.
//
//go:noinline
func parkDeep(park <-chan struct{}, started *sync.WaitGroup) byte {
	var pad [16 << 10]byte
	pad[len(pad)-1] = 1
	started.Done()
	<-park
	return pad[0] + pad[len(pad)-1]
}
