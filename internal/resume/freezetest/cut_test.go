package freezetest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rayito/rayito-agent/client"
)

// cutBound is the protocol's bound on handing old connections their close
// frame during a resume (section 11.7).
const cutBound = 2 * time.Second

// TestResumeDoesNotWaitForSilentPeers: a connection whose peer never
// reads (a client suspended with its laptop, or one whose route died with
// the old host) must not hold the resume answer past the protocol's 2 s
// bound; the agent hands it its close frame and answers. It is a bound
// from the contract, not a speed measure: the answer normally takes
// milliseconds, and the check allows the bound plus 2 s.
func TestResumeDoesNotWaitForSilentPeers(t *testing.T) {
	t.Parallel()
	a := startAgent(t, agentConfig{})
	hdr := http.Header{"Authorization": {"Bearer " + testToken}}
	var silent []*websocket.Conn
	for range 2 {
		ws, _, err := websocket.Dial(ctxLong(t), a.url+"/v1/connect", &websocket.DialOptions{HTTPHeader: hdr, Subprotocols: []string{"rayito.v1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer ws.CloseNow()
		silent = append(silent, ws)
	}
	c, rc := dialCounted(t, a)
	p, err := c.Exec(ctxLong(t), client.ExecOptions{Argv: []string{"sh", "-c", counterScript}})
	if err != nil {
		t.Fatal(err)
	}
	lines := newCounterLines("c", 1)
	done := make(chan error, 1)
	go func() { done <- lines.drain(p.Stdout()) }()
	eventually(t, "the command prints", func() bool { return lines.last() > 10 })

	start := time.Now()
	h, err := c.Resume(ctxLong(t), client.ResumeOptions{})
	took := time.Since(start)
	if err != nil || h.ResumeGeneration != 1 {
		t.Fatalf("resume: %+v, %v", h, err)
	}
	if took > cutBound+2*time.Second {
		t.Errorf("resume answered after %v with silent peers (agent says %d ms), past the %v bound", took, h.LastResume.DurationMs, cutBound)
	}
	rc.wait(t, 1)
	// The silent peers got their close frame, after the hello.
	for i, ws := range silent {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		var err error
		for err == nil {
			_, _, err = ws.Read(ctx)
		}
		cancel()
		if code := websocket.CloseStatus(err); code != 4000 {
			t.Errorf("silent peer %d: %v, want close 4000", i, err)
		}
	}
	at := lines.last()
	eventually(t, "the command's output flows again", func() bool { return lines.last() > at+20 })
	if err := p.Signal(ctxLong(t), client.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.Wait(ctxLong(t))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := lines.check(); err != nil {
		t.Fatal(err)
	}
}
