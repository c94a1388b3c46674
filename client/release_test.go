package client_test

import (
	"io"
	"runtime"
	"testing"

	"github.com/rayito/rayito-agent/client"
)

// TestReadStreamsCostNothing: 100 commands of 8 MiB each, read to the end
// through the SDK (which acknowledges as it reads), leave nothing behind:
// no retained bytes of the ended streams, and the heap in use back within
// a bound of where it was.
func TestReadStreamsCostNothing(t *testing.T) {
	a := newAgent(t)
	c := a.dial(t, client.Options{})
	ctx := ctxLong(t)
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapInuse
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
		return st.Used == 0 && st.Ended == 0
	})
	runtime.GC()
	runtime.ReadMemStats(&ms)
	// The bound leaves room for what the client and the agent keep of
	// their own (connections, the outcome table, 100 ended streams'
	// records) and for the other goroutines of the test binary.
	if grown := int64(ms.HeapInuse) - int64(before); grown > 8<<20 {
		t.Fatalf("heap in use grew by %d bytes after 100 read streams of 8 MiB", grown)
	}
}
