package client_test

import (
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rayito/rayito-agent/client"
)

// TestAgentRestartFailsHandles: a client whose agent restarted (a new
// process behind the same address, with new streams) must not reattach
// its old stream ids to the new agent's streams and read someone else's
// output: its live handles fail with ErrAgentRestarted, and the client
// goes on working with the new agent.
func TestAgentRestartFailsHandles(t *testing.T) {
	t.Parallel()
	first, second := newAgent(t), newAgent(t)
	proxy := newTCPProxy(t, strings.TrimPrefix(first.url, "ws://"))
	var reconnects atomic.Int32
	a := dialURL(t, proxy.url(), client.Options{OnReconnect: func(uint64) { reconnects.Add(1) }})
	ctx := ctxLong(t)
	before := a.Instance()
	if h, err := a.Health(ctx); err != nil || before == "" || h.Instance != before {
		t.Fatalf("instance %q, /health %q (%v)", before, h.Instance, err)
	}
	p, err := a.Exec(ctx, client.ExecOptions{Argv: sh("echo mine; exec sleep 60")})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(p.Stdout(), buf); err != nil || string(buf) != "mine\n" {
		t.Fatalf("first output %q, %v", buf, err)
	}

	// The agent goes away; a new one comes up at the same address, and
	// another client runs a command there before this one reconnects.
	proxy.retarget("")
	proxy.cut()
	b := second.dial(t, client.Options{})
	private := run(t, b, client.ExecOptions{Argv: sh("echo private line 1; echo private line 2")})
	if private.err != nil || string(private.stdout) != "private line 1\nprivate line 2\n" {
		t.Fatalf("other client's command: %q, %v", private.stdout, private.err)
	}
	proxy.retarget(strings.TrimPrefix(second.url, "ws://"))

	rest, readErr := io.ReadAll(p.Stdout())
	_, waitErr := p.Wait(ctx)
	if strings.Contains(string(rest), "private") {
		t.Fatalf("the old handle read the new agent's stream: %q", rest)
	}
	if !errors.Is(readErr, client.ErrAgentRestarted) || !errors.Is(waitErr, client.ErrAgentRestarted) {
		t.Fatalf("read error %v, wait error %v; want ErrAgentRestarted", readErr, waitErr)
	}
	eventually(t, "the client reconnected", func() bool { return reconnects.Load() > 0 })
	if got := a.Instance(); got == before || got != b.Instance() {
		t.Fatalf("instance after the restart %q, before %q, the new agent's %q", got, before, b.Instance())
	}
	// The client works with the new agent.
	if r := run(t, a, client.ExecOptions{Argv: sh("echo after")}); r.err != nil || string(r.stdout) != "after\n" {
		t.Fatalf("exec after the restart: %q, %v", r.stdout, r.err)
	}
	// An attach that names the old run is refused, whatever it matches.
	tagged, err := b.Exec(ctx, client.ExecOptions{Argv: sh("sleep 60"), Tag: "job"})
	if err != nil {
		t.Fatal(err)
	}
	defer tagged.Signal(ctx, client.SIGKILL)
	if _, err := a.Attach(ctx, client.AttachOptions{Tag: "job", Instance: before}); !client.HasCode(err, client.CodeNotFound) || !strings.Contains(err.Error(), "restarted") {
		t.Fatalf("attach naming the old instance: %v", err)
	}
	if _, err := a.Attach(ctx, client.AttachOptions{Stream: p.Stream()}); !client.HasCode(err, client.CodeNotFound) || !strings.Contains(err.Error(), "restarted") {
		t.Fatalf("attach of the old run's stream id: %v", err)
	}
	if _, err := a.Attach(ctx, client.AttachOptions{Tag: "job", Instance: a.Instance()}); err != nil {
		t.Fatalf("attach naming this instance: %v", err)
	}
}
