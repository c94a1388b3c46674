package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/internal/runaway"
)

// guardedProcesses is the process guard's maximum in this test's image:
// low, so the shell's fork bomb crosses it at once under TCG.
const guardedProcesses = 100

var guardImage = tokenImage{env: []string{"RAYITO_USER_PROCESS_GUARD=100"}}

// TestProcessGuardKillsAForkBomb: a command that grows past the guard's
// maximum of processes (the shell's fork bomb, at the default priority)
// is killed whole, its end says why, /health counts it, nothing of it is
// left, and the sandbox runs commands again; honest parallel work under
// the maximum (80 sleeps at once) is left alone.
func TestProcessGuardKillsAForkBomb(t *testing.T) {
	tv := vmConfigOf(t, &guardImage)
	v := bootHealthy(t, tv.cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := dial(t, ctx, v.AgentURL(), tv.token, client.Options{})
	g := guest{c}
	if out, err := g.sh(ctx, `for i in $(seq 80); do sleep 3 & done; wait; echo done`); err != nil || out != "done\n" {
		t.Fatalf("80 processes at once, under the guard's %d: %q, %v", guardedProcesses, out, err)
	}
	start := time.Now()
	bomb, err := c.Exec(ctx, client.ExecOptions{Argv: runaway.ForkBomb})
	if err != nil {
		t.Fatal(err)
	}
	// The bomb's own timeout ends it at 60 s if the guard does not.
	st, err := bomb.Wait(ctx)
	if err != nil || st.Signal != client.SIGKILL || !strings.Contains(st.Message, "process guard") {
		t.Fatalf("the fork bomb ended %+v (%v) after %v; want killed by the process guard", st, err, time.Since(start))
	}
	t.Logf("the bomb was killed after %v: %s", time.Since(start).Round(time.Millisecond), st.Message)
	h, err := c.Health(ctx)
	if err != nil || h.Isolation == nil || h.Isolation.RunawayKills != 1 {
		t.Fatalf("health after the kill: %+v, %v; want runaway_kills 1", h.Isolation, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		h, err := c.Health(ctx)
		if err == nil && h.Isolation.Tasks < 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the kill user work still has %+v tasks", h.Isolation)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out, err := g.run(ctx, "echo", "ok"); err != nil || out != "ok\n" {
		t.Fatalf("exec after the kill: %q, %v", out, err)
	}
}
