package client_test

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/internal/stream"
)

// blocked waits until a log holds at least full bytes and has stopped
// growing with the stream running, and returns its stats.
func blocked(t *testing.T, st *stream.Stream, name string, full uint64) stream.LogStats {
	t.Helper()
	l := st.Log(name)
	var prev stream.LogStats
	eventually(t, name+" fills up and stops growing", func() bool {
		cur := l.Stats()
		still := cur.End >= full && cur == prev
		prev = cur
		if !still {
			time.Sleep(300 * time.Millisecond)
		}
		return still
	})
	if st.Ended() != nil {
		t.Fatalf("stream %d ended: it was expected to be blocked", st.ID)
	}
	return prev
}

// TestBlockStreamBackpressureAndGrace: a block stream whose client stops
// reading holds its process (no loss, agent memory within the buffer);
// after the client has been gone for grace_ms the process runs on by
// dropping, and a client attaching from 0 is told about the dropped range
// before the data that follows it.
func TestBlockStreamBackpressureAndGrace(t *testing.T) {
	t.Parallel()
	const (
		total  = 50 << 20
		buffer = 1 << 20
		grace  = 2 * time.Second
	)
	a := newAgent(t)
	c1 := a.dial(t, client.Options{})
	ctx := ctxLong(t)
	g := grace
	p, err := c1.Exec(ctx, client.ExecOptions{Argv: sh(patternCmd(total)), Buffer: buffer, Grace: &g})
	if err != nil {
		t.Fatal(err)
	}
	st := a.streams.Get(p.Stream())
	stats := blocked(t, st, "stdout", buffer)
	if stats.End-stats.Start > buffer || stats.Lost != 0 || stats.End >= total {
		t.Fatalf("blocked stream's log %+v: want at most %d retained, nothing lost", stats, buffer)
	}
	time.Sleep(time.Second)
	if again := st.Log("stdout").Stats(); again != stats || st.Ended() != nil {
		t.Fatalf("the process kept producing while unread: %+v then %+v", stats, again)
	}

	left := time.Now() // before the agent can see the client go
	c1.Close()
	select {
	case <-st.Done():
	case <-time.After(waitLong):
		t.Fatal("the process did not finish after the grace period")
	}
	if ran := time.Since(left); ran < grace {
		t.Fatalf("the process finished %v after its client left, within the %v grace", ran, grace)
	}
	final := st.Log("stdout").Stats()
	if final.End != total || final.Lost == 0 || final.End-final.Start > buffer {
		t.Fatalf("after the grace: %+v", final)
	}

	c2 := a.dial(t, client.Options{})
	q, err := c2.Attach(ctx, client.AttachOptions{Stream: p.Stream()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = q.Stdout().Read(make([]byte, 10))
	var gap *client.GapError
	if !errors.As(err, &gap) || gap.From != 0 || gap.To != final.Start || gap.Channel != "stdout" {
		t.Fatalf("first read from 0: %v, want a gap [0, %d)", err, final.Start)
	}
	w := &patternWriter{off: gap.To}
	if _, err := io.Copy(w, q.Stdout()); err != nil {
		t.Fatal(err)
	}
	if w.off != total {
		t.Fatalf("gap and data cover [0, %d), want [0, %d)", w.off, total)
	}
	if gaps := q.Gaps(); len(gaps) != 1 || gaps[0] != *gap {
		t.Fatalf("Gaps() = %v", gaps)
	}
}

// TestStalledStreamDoesNotDelayOthers: one stream on a connection is
// stalled (never read); other streams on the same connection flow.
func TestStalledStreamDoesNotDelayOthers(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	c := a.dial(t, client.Options{})
	ctx := ctxLong(t)
	stalled, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"yes", "stalled"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stalled.Signal(ctx, client.SIGKILL)
		io.Copy(io.Discard, stalled.Stdout())
		stalled.Wait(ctx)
	})
	st := a.streams.Get(stalled.Stream())
	before := blocked(t, st, "stdout", stream.DefaultByteCapacity)

	r := run(t, c, client.ExecOptions{Argv: sh(patternCmd(8<<20) + "; echo fine >&2")})
	if r.err != nil || len(r.stdout) != 8<<20 || string(r.stderr) != "fine\n" || r.status.ExitCode() != 0 {
		t.Fatalf("stream beside a stalled one: %d bytes, %q, %s, %v", len(r.stdout), r.stderr, code(r.status), r.err)
	}
	if err := checkPattern(r.stdout, 0); err != nil {
		t.Fatal(err)
	}
	if after := st.Log("stdout").Stats(); after != before {
		t.Fatalf("the stalled stream moved without being read: %+v then %+v", before, after)
	}
}
