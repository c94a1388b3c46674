package freezetest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// minIdle is the smallest idle policy the agent accepts.
const minIdle = 60 * time.Second

// TestIdleHookRunsOnce: with no websocket traffic, /v1/traffic turns idle
// once the configured time has passed, although /health, /v1/traffic and
// /metrics are polled all along, and the --on-idle hook runs once, with
// the traffic state on its stdin. A counted byte ends the idle state.
// It takes over a minute, in parallel with the rest.
func TestIdleHookRunsOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	hook := "cat > " + filepath.Join(dir, "stdin.json") + "; echo ran >> " + count
	started := time.Now()
	a := startAgent(t, agentConfig{Args: []string{"--max-idle-seconds", "60", "--on-idle", hook}})
	runs := func() int {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "ran\n")
	}

	var tr client.Traffic
	var lastIdle int64
	deadline := time.Now().Add(minIdle + waitLong)
	for {
		a.health(t)
		if status, body := a.request(t, "GET", "/metrics", testToken, ""); status != 200 {
			t.Fatalf("metrics: HTTP %d %s", status, body)
		}
		tr = traffic(t, a, testToken)
		if tr.BytesIn != 0 || tr.BytesOut != 0 || tr.Connections != 0 {
			t.Fatalf("polls were counted as traffic: %+v", tr)
		}
		if tr.IdlePolicy == nil || tr.IdlePolicy.MaxIdleSeconds != 60 {
			t.Fatalf("idle policy %+v, want 60 s", tr.IdlePolicy)
		}
		if tr.IdleMs < lastIdle {
			t.Fatalf("idle_ms went back from %d to %d with no traffic", lastIdle, tr.IdleMs)
		}
		lastIdle = tr.IdleMs
		if tr.Idle != (tr.IdleMs >= minIdle.Milliseconds()) {
			t.Fatalf("idle %v with idle_ms %d and a 60 s policy", tr.Idle, tr.IdleMs)
		}
		if n := runs(); n > 0 && !tr.Idle {
			t.Fatalf("the hook ran %d times before the agent reported idle (%+v)", n, tr)
		}
		if tr.Idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not idle after %v: %+v", time.Since(started), tr)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if since := time.Since(started); since < minIdle {
		t.Fatalf("idle after %v, before the 60 s policy", since)
	}

	eventually(t, "the hook ran", func() bool { return runs() > 0 })
	// Keep polling for several of the agent's idle checks: the hook must
	// not run again while the sandbox stays idle.
	for range 16 {
		a.health(t)
		if tr := traffic(t, a, testToken); !tr.Idle {
			t.Fatalf("idle state ended with only polls: %+v", tr)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if n := runs(); n != 1 {
		t.Fatalf("the hook ran %d times, want once", n)
	}
	var in client.Traffic
	b, err := os.ReadFile(filepath.Join(dir, "stdin.json"))
	if err != nil || json.Unmarshal(b, &in) != nil || !in.Idle || in.IdleMs < minIdle.Milliseconds() ||
		in.IdlePolicy == nil || in.IdlePolicy.MaxIdleSeconds != 60 {
		t.Fatalf("hook's stdin %q (%v), want the idle traffic state", b, err)
	}

	// A connection is traffic: the idle state ends.
	c := a.dial(t, client.Options{})
	if _, err := c.List(ctxLong(t), ""); err != nil {
		t.Fatal(err)
	}
	if tr := traffic(t, a, testToken); tr.Idle || tr.BytesIn == 0 || tr.BytesOut == 0 || tr.Connections != 1 {
		t.Fatalf("after a connection: %+v, want traffic and not idle", tr)
	}
}
