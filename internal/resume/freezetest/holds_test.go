package freezetest

import (
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// TestHoldsSurvivePause: a lease and a keep_awake command's hold outlive
// a pause, the resume that cuts every connection and the client's
// reconnect. After the resume the lease has its full ttl again, the
// client renews and releases it over its new connection, and the
// command's hold ends with the command. --max-hold-seconds bounds both.
func TestHoldsSurvivePause(t *testing.T) {
	t.Parallel()
	const maxHold = 36000
	a := startAgent(t, agentConfig{Args: []string{"--max-idle-seconds", "60", "--max-hold-seconds", "36000"}})
	c, rc := dialCounted(t, a)
	ctx := ctxLong(t)
	lease, err := c.Hold(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"sleep", "1000"}, KeepAwake: true})
	if err != nil {
		t.Fatal(err)
	}
	before := traffic(t, a, testToken)
	if len(before.Holds) != 2 || before.Holds[0].Hold != lease.ID() || before.Holds[1].Hold != p.Hold() || before.Holds[1].Stream != p.Stream() {
		t.Fatalf("holds %+v, made %s and %s", before.Holds, lease.ID(), p.Hold())
	}
	if h := before.Holds[1]; h.ExpiresUnixMs != h.CreatedUnixMs+maxHold*1000 {
		t.Fatalf("a command's hold expires at %d, want its creation %d plus --max-hold-seconds", h.ExpiresUnixMs, h.CreatedUnixMs)
	}

	pauseAndResume(t, a, c, rc, "holds-1", nil)
	after := traffic(t, a, testToken)
	if after.Idle || len(after.Holds) != 2 {
		t.Fatalf("after the resume: %+v", after)
	}
	for i, h := range after.Holds {
		if b := before.Holds[i]; h.Hold != b.Hold || h.Stream != b.Stream || h.CreatedUnixMs != b.CreatedUnixMs || !h.Counting {
			t.Fatalf("hold %d before the pause %+v, after %+v", i, b, h)
		}
	}
	if after.Holds[0].ExpiresUnixMs < before.Holds[0].ExpiresUnixMs+pauseFor.Milliseconds() {
		t.Fatalf("the resume did not give the lease its ttl again: expires %d before, %d after a %v pause",
			before.Holds[0].ExpiresUnixMs, after.Holds[0].ExpiresUnixMs, pauseFor)
	}

	if err := lease.Renew(ctx, 2*time.Minute); err != nil {
		t.Fatalf("renewing after the reconnect: %v", err)
	}
	if err := p.Signal(ctx, client.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the command's hold ends with it", func() bool {
		l := traffic(t, a, testToken).Holds
		return len(l) == 1 && l[0].Hold == lease.ID() && l[0].TTLMs == 120000
	})
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if tr := traffic(t, a, testToken); len(tr.Holds) != 0 || tr.Idle {
		t.Fatalf("after the release: %+v", tr)
	}
}
