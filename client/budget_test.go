package client_test

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/internal/stream"
)

// fastPattern checks that what is written to it continues the pattern,
// comparing whole runs (a byte at a time is slow under the race detector).
type fastPattern struct{ off uint64 }

var patternRuns = bytes.Repeat([]byte(pattern), (1<<20)/len(pattern)+2)

func (w *fastPattern) Write(b []byte) (int, error) {
	for done := 0; done < len(b); {
		n := min(len(b)-done, 1<<20)
		at := int(w.off % uint64(len(pattern)))
		if !bytes.Equal(b[done:done+n], patternRuns[at:at+n]) {
			return done, checkPattern(b[done:done+n], w.off)
		}
		done += n
		w.off += uint64(n)
	}
	return len(b), nil
}

// TestBudgetHoldsUnderStalledReaders: fifty commands write 64 MiB each at
// once while their clients read nothing. The agent's retention budget
// fills and is never exceeded: the commands wait, as on a full pipe. Then
// the clients read, and every byte arrives, in order, with no gap.
func TestBudgetHoldsUnderStalledReaders(t *testing.T) {
	const (
		budget = 32 << 20
		count  = 50
	)
	size := 64 << 20
	if testing.Short() {
		size = 8 << 20 // fifty times the budget still holds a small part of it
	}
	a := newAgent(t, stream.Limits{Budget: budget})
	c := a.dial(t, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	procs := make([]*client.Process, count)
	for i := range procs {
		p, err := c.Exec(ctx, client.ExecOptions{Argv: sh(patternCmd(size))})
		if err != nil {
			t.Fatal(err)
		}
		procs[i] = p
	}
	budgetOf := func() stream.BudgetStats { return a.streams.Budget().Stats() }
	eventually(t, "the budget filled", func() bool { return budgetOf().Used > budget*7/8-(1<<20) })
	time.Sleep(300 * time.Millisecond) // stalled: the commands wait
	if st := budgetOf(); st.Peak > st.Limit {
		t.Fatalf("budget exceeded while the readers stalled: %+v", st)
	}
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := io.Copy(&fastPattern{}, p.Stdout())
			if err != nil || n != int64(size) {
				t.Errorf("command %d: %d bytes, %v", i, n, err)
				return
			}
			if st, err := p.Wait(ctx); err != nil || st.ExitCode() != 0 {
				t.Errorf("command %d: %v %v", i, st, err)
			}
		}()
	}
	wg.Wait()
	if st := budgetOf(); st.Peak > st.Limit {
		t.Fatalf("budget exceeded: %+v", st)
	}
	eventually(t, "every stream let its buffers go", func() bool { return budgetOf().Ended <= count*stream.ReadTail })
}
