package e2e

import (
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// checkIdle: with a client connected but nothing running, the host's
// traffic polls and health probes must not count as activity: the byte
// counters stay put and idle_ms keeps growing.
func checkIdle(t *testing.T, c *client.Client) {
	ctx := opContext(t)
	// Let the last acknowledgements of the finished streams go out: wait
	// for two equal readings a second apart.
	var base client.Traffic
	for prev := (client.Traffic{}); ; prev = base {
		var err error
		if base, err = c.Traffic(ctx); err != nil {
			t.Fatal(err)
		}
		if base.BytesIn == prev.BytesIn && base.BytesOut == prev.BytesOut {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("traffic never settled: %+v", base)
		case <-time.After(time.Second):
		}
	}
	const polls = 30
	last := base
	started := time.Now()
	for i := 0; i < polls; i++ {
		if _, err := c.Health(ctx); err != nil {
			t.Fatal(err)
		}
		tr, err := c.Traffic(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tr.BytesIn != base.BytesIn || tr.BytesOut != base.BytesOut || tr.LastActivityUnixMs != base.LastActivityUnixMs {
			t.Fatalf("poll %d counted as traffic: %+v, before the polls %+v", i, tr, base)
		}
		if tr.IdleMs < last.IdleMs {
			t.Errorf("idle_ms went back from %d to %d", last.IdleMs, tr.IdleMs)
		}
		last = tr
		time.Sleep(100 * time.Millisecond)
	}
	if grew, elapsed := last.IdleMs-base.IdleMs, time.Since(started).Milliseconds(); grew < elapsed/2 {
		t.Errorf("idle_ms grew by %d ms over %d ms of polling: %+v, before %+v", grew, elapsed, last, base)
	}
	t.Logf("%d health probes and traffic polls over %s: bytes in %d, out %d unchanged; idle_ms %d to %d; connections %d",
		polls, time.Since(started).Round(time.Millisecond), base.BytesIn, base.BytesOut, base.IdleMs, last.IdleMs, last.Connections)
}
