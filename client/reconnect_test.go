package client_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rayito/rayito-agent/client"
)

// patternWriter checks that what it is given continues the pattern from
// off, and calls at(n) once as the count passes each of the marks.
type patternWriter struct {
	off   uint64
	marks []uint64
	at    func(n uint64)
}

func (w *patternWriter) Write(b []byte) (int, error) {
	if err := checkPattern(b, w.off); err != nil {
		return 0, err
	}
	w.off += uint64(len(b))
	for len(w.marks) > 0 && w.off >= w.marks[0] {
		w.marks = w.marks[1:]
		w.at(w.off)
	}
	return len(b), nil
}

// TestReattachFromCursor: a client loses its connection in the middle of
// the output; another attaches from the first one's consumed cursor and
// gets the rest, so together they have every byte exactly once.
func TestReattachFromCursor(t *testing.T) {
	t.Parallel()
	const total = 20 << 20
	a := newAgent(t)
	proxy := newTCPProxy(t, a.http.Listener.Addr().String())
	c1 := dialURL(t, proxy.url(), client.Options{DisableReconnect: true})
	ctx := ctxLong(t)
	p, err := c1.Exec(ctx, client.ExecOptions{Argv: sh(patternCmd(total))})
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 5<<20+12345)
	if _, err := io.ReadFull(p.Stdout(), first); err != nil {
		t.Fatal(err)
	}
	proxy.cut()
	// The handle hands out what had arrived, then reports the loss.
	rest, err := io.ReadAll(p.Stdout())
	if !errors.Is(err, client.ErrConnectionLost) {
		t.Fatalf("read after the cut: %v", err)
	}
	got := append(first, rest...)
	if err := checkPattern(got, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.List(ctx, ""); !errors.Is(err, client.ErrConnectionLost) {
		t.Fatalf("call after the cut: %v", err)
	}
	from := p.Cursors()
	if from["stdout"] != uint64(len(got)) {
		t.Fatalf("cursors %v after consuming %d bytes", from, len(got))
	}

	c2 := a.dial(t, client.Options{})
	q, err := c2.Attach(ctx, client.AttachOptions{Stream: p.Stream(), From: from})
	if err != nil {
		t.Fatal(err)
	}
	w := &patternWriter{off: from["stdout"]}
	if _, err := io.Copy(w, q.Stdout()); err != nil {
		t.Fatal(err)
	}
	if w.off != total {
		t.Fatalf("the two clients got %d bytes together, want %d", w.off, total)
	}
	if st, err := q.Wait(ctx); err != nil || st.ExitCode() != 0 || len(q.Gaps()) != 0 {
		t.Fatalf("wait %s %v, gaps %v", code(st), err, q.Gaps())
	}
}

// TestReconnectAfterCuts: the network drops three times during a large
// output; the client reconnects on its own and its reader sees one stream
// with every byte once.
func TestReconnectAfterCuts(t *testing.T) {
	t.Parallel()
	const total = 30 << 20
	a := newAgent(t)
	proxy := newTCPProxy(t, a.http.Listener.Addr().String())
	var reconnects atomic.Int32
	c := dialURL(t, proxy.url(), client.Options{OnReconnect: func(uint64) { reconnects.Add(1) }})
	ctx := ctxLong(t)
	p, err := c.Exec(ctx, client.ExecOptions{Argv: sh(patternCmd(total) + "; echo end >&2")})
	if err != nil {
		t.Fatal(err)
	}
	w := &patternWriter{marks: []uint64{3 << 20, 11 << 20, 23 << 20}, at: func(uint64) { proxy.cutAndWait(t, &reconnects) }}
	var stderr []byte
	var errErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); stderr, errErr = io.ReadAll(p.Stderr()) }()
	if _, err := io.Copy(w, p.Stdout()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if w.off != total || errErr != nil || string(stderr) != "end\n" {
		t.Fatalf("got %d bytes of stdout (want %d), stderr %q %v", w.off, total, stderr, errErr)
	}
	st, err := p.Wait(ctx)
	if err != nil || st.ExitCode() != 0 || len(p.Gaps()) != 0 {
		t.Fatalf("wait %s %v, gaps %v", code(st), err, p.Gaps())
	}
	if n := reconnects.Load(); n != 3 {
		t.Fatalf("%d reconnects after 3 cuts", n)
	}
	// The client still works on its latest connection.
	if r := run(t, c, client.ExecOptions{Argv: []string{"echo", "after"}}); string(r.stdout) != "after\n" {
		t.Fatalf("exec after reconnecting: %q %v", r.stdout, r.err)
	}
}

// TestResumeCloseReattaches: the agent ends every attachment with reason
// resume and closes with 4000 (what it does after a VM resume); the client
// reconnects and its readers continue without loss or repetition.
func TestResumeCloseReattaches(t *testing.T) {
	t.Parallel()
	const total = 30 << 20
	a := newAgent(t)
	var reconnects atomic.Int32
	c := a.dial(t, client.Options{OnReconnect: func(uint64) { reconnects.Add(1) }})
	ctx := ctxLong(t)
	p, err := c.Exec(ctx, client.ExecOptions{Argv: sh(patternCmd(total))})
	if err != nil {
		t.Fatal(err)
	}
	idle, err := c.Exec(ctx, client.ExecOptions{Argv: sh("read x; echo got $x"), Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	var cuts sync.WaitGroup
	cut := func(uint64) {
		cuts.Add(1)
		go func() {
			defer cuts.Done()
			cctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			a.cuts.CutForResume(cctx, 1<<62)
		}()
	}
	w := &patternWriter{marks: []uint64{4 << 20, 17 << 20}, at: cut}
	if _, err := io.Copy(w, p.Stdout()); err != nil {
		t.Fatal(err)
	}
	cuts.Wait()
	if w.off != total {
		t.Fatalf("got %d bytes, want %d", w.off, total)
	}
	if st, err := p.Wait(ctx); err != nil || st.ExitCode() != 0 || len(p.Gaps()) != 0 {
		t.Fatalf("wait %s %v, gaps %v", code(st), err, p.Gaps())
	}
	eventually(t, "two reconnects", func() bool { return reconnects.Load() >= 2 })
	// The quiet process was reattached too: input reaches it.
	if _, err := idle.Write([]byte("hi\n")); err != nil {
		t.Fatal(err)
	}
	r := collect(ctx, idle)
	if r.err != nil || strings.TrimSpace(string(r.stdout)) != "got hi" {
		t.Fatalf("reattached idle process: %q %v", r.stdout, r.err)
	}
}

// TestCallsInFlightAtDrop: an exec whose request is lost with the
// connection is sent again on the next with its op_id, runs once and
// succeeds; a list in flight at the same moment is retried too.
func TestCallsInFlightAtDrop(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	proxy := newTCPProxy(t, a.http.Listener.Addr().String())
	c := dialURL(t, proxy.url(), client.Options{})
	ctx := ctxLong(t)
	proxy.swallow.Store(true)
	type execd struct {
		p   *client.Process
		err error
	}
	exec := make(chan execd, 1)
	go func() {
		p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"echo", "once"}})
		exec <- execd{p, err}
	}()
	type listed struct {
		streams []client.StreamInfo
		err     error
	}
	list := make(chan listed, 1)
	go func() {
		s, err := c.List(ctx, "")
		list <- listed{s, err}
	}()
	eventually(t, "both calls are in flight", func() bool { return client.PendingCalls(c) == 2 })
	proxy.swallow.Store(false)
	proxy.cut()
	e := <-exec
	if e.err != nil {
		t.Fatalf("exec in flight at the drop: %v", e.err)
	}
	if r := collect(ctx, e.p); r.err != nil || string(r.stdout) != "once\n" {
		t.Fatalf("the exec sent again: %q %v", r.stdout, r.err)
	}
	if l := <-list; l.err != nil {
		t.Fatalf("list retried after the drop: %v", l.err)
	}
	if got := a.streams.List(""); len(got) != 1 {
		t.Fatalf("the agent has %d streams; the exec ran once", len(got))
	}
}

// TestReattachWithFullBuffer: the connection drops while the client holds
// a whole retention buffer unread; after the reattach from what it
// received, reading on must release the agent's buffer and let the
// process finish.
func TestReattachWithFullBuffer(t *testing.T) {
	t.Parallel()
	const total, buffer = 8 << 20, 1 << 20
	a := newAgent(t)
	proxy := newTCPProxy(t, a.http.Listener.Addr().String())
	var reconnects atomic.Int32
	c := dialURL(t, proxy.url(), client.Options{OnReconnect: func(uint64) { reconnects.Add(1) }})
	ctx := ctxLong(t)
	p, err := c.Exec(ctx, client.ExecOptions{Argv: sh(patternCmd(total)), Buffer: buffer})
	if err != nil {
		t.Fatal(err)
	}
	st := a.streams.Get(p.Stream())
	stats := blocked(t, st, "stdout", buffer)
	if stats.End != buffer {
		t.Fatalf("blocked at %+v, want a full buffer of %d", stats, buffer)
	}
	proxy.cut()
	eventually(t, "reconnected", func() bool { return reconnects.Load() == 1 })
	w := &patternWriter{}
	if _, err := io.Copy(w, p.Stdout()); err != nil || w.off != total {
		t.Fatalf("read %d bytes of %d: %v", w.off, total, err)
	}
}
