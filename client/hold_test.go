package client_test

import (
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// holds reads the agent's holds from /v1/traffic.
func holds(t *testing.T, c *client.Client) []client.HoldInfo {
	t.Helper()
	tr, err := c.Traffic(ctxLong(t))
	if err != nil {
		t.Fatal(err)
	}
	return tr.Holds
}

// A Hold is listed by the agent, renewed, survives the client's
// reconnect after a resume, and is released; bad ttls and a renewal after
// the release get the agent's errors.
func TestHoldHandle(t *testing.T) {
	a := newAgent(t)
	// The resume below cuts c's connection too: c's release must wait for
	// its reconnect, since a release that a cut leaves unanswered is not
	// repeated (it may have been done).
	cReconnected := make(chan uint64, 1)
	c := a.dial(t, client.Options{OnReconnect: func(gen uint64) { cReconnected <- gen }})
	ctx := ctxLong(t)
	h, err := c.Hold(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l := holds(t, c); len(l) != 1 || l[0].Hold != h.ID() || l[0].TTLMs != 60000 || !l[0].Counting || l[0].Stream != 0 {
		t.Fatalf("holds %+v, made %+v", l, h.Info())
	}
	first := h.Expires()
	if until := time.Until(first); until <= 0 || until > time.Minute {
		t.Fatalf("a one-minute hold expires in %v", until)
	}

	reconnected := make(chan uint64, 1)
	c2 := a.dial(t, client.Options{OnReconnect: func(gen uint64) { reconnected <- gen }})
	h2, err := c2.Hold(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Resume(ctx, client.ResumeOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reconnected:
	case <-time.After(waitLong):
		t.Fatal("no reconnect after the resume")
	}
	if err := h2.Renew(ctx, 2*time.Minute); err != nil {
		t.Fatalf("renewing after a reconnect: %v", err)
	}
	if info := h2.Info(); info.TTLMs != 120000 || !h2.Expires().After(first) {
		t.Fatalf("renewed: %+v", info)
	}
	if err := h2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h2.Renew(ctx, time.Minute); !client.HasCode(err, client.CodeNotFound) {
		t.Fatalf("renewing a released hold: %v", err)
	}
	select {
	case <-cReconnected:
	case <-time.After(waitLong):
		t.Fatal("the first client did not reconnect after the resume")
	}
	if err := c.ReleaseHold(ctx, h.ID()); err != nil {
		t.Fatal(err)
	}
	if l := holds(t, c); len(l) != 0 {
		t.Fatalf("holds after both were released: %+v", l)
	}
	for _, ttl := range []time.Duration{0, -time.Second, 999 * time.Millisecond, time.Hour + time.Millisecond} {
		if _, err := c.Hold(ctx, ttl); !client.HasCode(err, client.CodeBadRequest) {
			t.Errorf("Hold(%v): %v", ttl, err)
		}
	}
}

// KeepAwake on Exec, PTY and a cell makes a hold that the handle names
// and that ends with the stream.
func TestKeepAwakeOptions(t *testing.T) {
	a := newAgent(t)
	// The resume below cuts c's connection too: c's release must wait for
	// its reconnect, since a release that a cut leaves unanswered is not
	// repeated (it may have been done).
	cReconnected := make(chan uint64, 1)
	c := a.dial(t, client.Options{OnReconnect: func(gen uint64) { cReconnected <- gen }})
	ctx := ctxLong(t)
	plain, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"true"}})
	if err != nil || plain.Hold() != "" {
		t.Fatalf("exec without KeepAwake: hold %q, %v", plain.Hold(), err)
	}
	p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"sleep", "1000"}, KeepAwake: true})
	if err != nil {
		t.Fatal(err)
	}
	pty, err := c.PTY(ctx, client.PTYOptions{Argv: []string{"sleep", "1000"}, KeepAwake: true})
	if err != nil {
		t.Fatal(err)
	}
	cell, err := c.DefaultKernel().Run(ctx, "input()", client.ExecuteOptions{AllowStdin: true, KeepAwake: true})
	if err != nil {
		t.Fatal(err)
	}
	l := holds(t, c)
	if len(l) != 3 {
		t.Fatalf("holds %+v", l)
	}
	for i, want := range []struct {
		hold   string
		stream uint64
	}{{p.Hold(), p.Stream()}, {pty.Hold(), pty.Stream()}, {cell.Hold(), cell.Stream()}} {
		if want.hold == "" || l[i].Hold != want.hold || l[i].Stream != want.stream {
			t.Fatalf("hold %d: listed %+v, handle %+v", i, l[i], want)
		}
	}
	if err := p.Signal(ctx, client.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := pty.Signal(ctx, client.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the kernel asks for input", func() bool { return cell.Reply(ctx, "x") == nil })
	if _, err := cell.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the holds end with their streams", func() bool { return len(holds(t, c)) == 0 })
}
