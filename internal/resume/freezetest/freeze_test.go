package freezetest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// TestFreezeHoldsTheTree checks the simulation itself, with every freezer
// that works here: while frozen, neither the agent nor a command it runs
// makes progress; after the thaw both do again.
func TestFreezeHoldsTheTree(t *testing.T) {
	t.Parallel()
	for _, kind := range availableFreezers() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			a := startAgent(t, agentConfig{Freezer: kind})
			c := a.dial(t, client.Options{})
			out := filepath.Join(t.TempDir(), "ticks")
			p, err := c.Exec(ctxLong(t), client.ExecOptions{Argv: []string{"sh", "-c", "while :; do echo x >> " + out + "; sleep 0.01; done"}})
			if err != nil {
				t.Fatal(err)
			}
			size := func() int64 {
				st, err := os.Stat(out)
				if err != nil {
					return 0
				}
				return st.Size()
			}
			eventually(t, "the command writes", func() bool { return size() > 20 })

			a.pause(t)
			before := size()
			time.Sleep(500 * time.Millisecond)
			if after := size(); after != before {
				t.Fatalf("a frozen command wrote: %d bytes, then %d", before, after)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			_, err = client.GetHealth(ctx, a.url, nil)
			cancel()
			if err == nil {
				t.Fatal("a frozen agent answered /health")
			}

			a.unpause(t)
			eventually(t, "the command writes again", func() bool { return size() > before })
			a.health(t)
			if err := p.Signal(ctxLong(t), client.SIGKILL); err != nil {
				t.Fatal(err)
			}
			st, err := p.Wait(ctxLong(t))
			if err != nil || st.Signal != client.SIGKILL {
				t.Fatalf("wait: %v, %v", st, err)
			}
		})
	}
}
