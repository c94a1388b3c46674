package client_test

import (
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// TestRepeatedCutsWithoutReading: the connection drops three times while
// the application reads nothing. Each reattach (from what was received)
// lets the agent send another window, so the client holds more than two
// windows unread; that is the protocol working, not the agent breaking
// the window, and the reader then gets every byte once.
func TestRepeatedCutsWithoutReading(t *testing.T) {
	t.Parallel()
	const total, window = 16 << 20, 1 << 20
	a := newAgent(t)
	proxy := newTCPProxy(t, a.http.Listener.Addr().String())
	var reconnects atomic.Int32
	c := dialURL(t, proxy.url(), client.Options{OnReconnect: func(uint64) { reconnects.Add(1) }})
	ctx := ctxLong(t)
	p, err := c.Exec(ctx, client.ExecOptions{Argv: sh(patternCmd(total))})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		eventually(t, "a full window arrived", func() bool { return client.Buffered(p, "stdout") >= i*window })
		proxy.cutAndWait(t, &reconnects)
	}
	eventually(t, "the fourth window arrived", func() bool {
		select {
		case <-p.Done():
			return true
		default:
			return client.Buffered(p, "stdout") >= 4*window
		}
	})
	w := &patternWriter{}
	if _, err := io.Copy(w, p.Stdout()); err != nil || w.off != total {
		t.Fatalf("read %d bytes of %d: %v", w.off, total, err)
	}
	if st, err := p.Wait(ctx); err != nil || st.ExitCode() != 0 || len(p.Gaps()) != 0 {
		t.Fatalf("wait %s %v, gaps %v", code(st), err, p.Gaps())
	}
}

// TestCallbackStopsAtClose: Close lets an output callback finish its
// current call, and then calls it no more, even with output buffered.
func TestCallbackStopsAtClose(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	c := a.dial(t, client.Options{})
	ctx := ctxLong(t)
	var calls atomic.Int32
	release := make(chan struct{})
	p, err := c.Exec(ctx, client.ExecOptions{Argv: sh("printf a; sleep 0.5; printf b; exec sleep 60"), OnStdout: func([]byte) {
		if calls.Add(1) == 1 {
			<-release
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	// "a" is in the callback, "b" waits behind it.
	eventually(t, "both writes arrived", func() bool { return client.Buffered(p, "stdout") == 2 })
	c.Close()
	close(release)
	if _, err := p.Wait(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("wait after close: %v", err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("callback called %d times; after Close it must stop", n)
	}
}

// TestCallInFlightAtClose: a call waiting for its answer when Close is
// called fails with ErrClosed, not with a lost connection that invites a
// retry.
func TestCallInFlightAtClose(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	proxy := newTCPProxy(t, a.http.Listener.Addr().String())
	c := dialURL(t, proxy.url(), client.Options{})
	ctx := ctxLong(t)
	proxy.swallow.Store(true)
	execErr := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"true"}})
		execErr <- err
	}()
	eventually(t, "the exec is in flight", func() bool { return client.PendingCalls(c) == 1 })
	proxy.swallow.Store(false)
	c.Close()
	if err := <-execErr; !errors.Is(err, client.ErrClosed) {
		t.Fatalf("exec in flight at Close: %v", err)
	}
}

// TestSilentDropReconnects: the route dies without a reset (nothing
// arrives, nothing errors); the client's pings notice, it reconnects, and
// a quiet process's handle works on.
func TestSilentDropReconnects(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	proxy := newTCPProxy(t, a.http.Listener.Addr().String())
	var reconnects atomic.Int32
	c := dialURL(t, proxy.url(), client.Options{PingInterval: 300 * time.Millisecond, OnReconnect: func(uint64) { reconnects.Add(1) }})
	ctx := ctxLong(t)
	p, err := c.Exec(ctx, client.ExecOptions{Argv: sh("read x; echo got $x"), Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	proxy.stall()
	eventually(t, "the client noticed the dead route and reconnected", func() bool { return reconnects.Load() >= 1 })
	if _, err := p.Write([]byte("hi\n")); err != nil {
		t.Fatal(err)
	}
	if r := collect(ctx, p); r.err != nil || string(r.stdout) != "got hi\n" {
		t.Fatalf("after the silent drop: %q %v", r.stdout, r.err)
	}
}
