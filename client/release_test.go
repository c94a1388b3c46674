package client_test

import (
	"io"
	"runtime"
	"testing"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/internal/stream"
)

// TestReadStreamsCostNothing: 100 commands of 8 MiB each, read to the end
// through the SDK (which acknowledges as it reads), leave nothing behind:
// no more than the last 64 KiB of each ended stream retained, and the
// live heap (after a
// collection, once the agent has handed its pooled buffers back) within a
// bound of where it was.
func TestReadStreamsCostNothing(t *testing.T) {
	a := newAgent(t)
	c := a.dial(t, client.Options{})
	ctx := ctxLong(t)
	live := func() int64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	before := live()
	for i := range 100 {
		p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"head", "-c", "8388608", "/dev/zero"}})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, p.Stdout()); err != nil || n != 8<<20 {
			t.Fatalf("command %d: %d bytes, %v", i, n, err)
		}
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "every read stream let its buffers go", func() bool {
		st := a.streams.Budget().Stats()
		return st.Used == st.Ended && st.Ended <= 100*stream.ReadTail
	})
	// The bound leaves room for the tails (6.25 MiB), what the client
	// keeps (the last handles' read buffers, 1 MiB each), the agent's
	// records of 100 ended streams and outcomes, and the other goroutines
	// of the test binary; 100 streams of 8 MiB kept would be 800 MiB.
	eventually(t, "the live heap back within 16 MiB of before", func() bool {
		grown := live() - before
		return grown <= 16<<20
	})
}
