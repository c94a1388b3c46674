package e2e

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/rootfs/vm"
)

// TestInitIntegrations boots each init integration and checks that the
// agent gets its token from the environment file, comes back (with it)
// after it dies, and that the guest shuts down cleanly on ctrl-alt-del.
func TestInitIntegrations(t *testing.T) {
	for _, tc := range []struct {
		name string
		init string
		// halted is what the kernel prints last: rayito-init powers
		// off, systemd maps ctrl-alt-del to a reboot.
		halted string
	}{
		{"rayito-init", vm.InitDefault, "reboot: Power down"},
		{"systemd", vm.InitSystemd, "reboot: Restarting system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tv := vmConfig(t)
			tv.cfg.Init = tc.init
			v := bootHealthy(t, tv.cfg)
			ctx := opContext(t)
			if bad, err := client.Dial(ctx, v.AgentURL(), client.Options{Token: "not-" + tv.token}); !errors.Is(err, client.ErrUnauthorized) {
				t.Errorf("dial with a wrong token: %v, want ErrUnauthorized", err)
				if err == nil {
					bad.Close()
				}
			}
			c := dial(t, ctx, v.AgentURL(), tv.token, client.Options{DisableReconnect: true})
			g := guest{c}
			// The image shields the agent from the OOM killer, not what it
			// runs: a command and what that forks score as usual. The agent
			// has CAP_SYS_RESOURCE, so children are born so (proc/oom.go),
			// not set after their fork.
			if out, err := g.sh(ctx, `cat /proc/$PPID/oom_score_adj /proc/self/oom_score_adj; sh -c 'cat /proc/self/oom_score_adj'`); err != nil || out != "-1000\n0\n0\n" {
				t.Errorf("oom_score_adj of the agent, a command's child and grandchild: %q, %v; want -1000, 0, 0", out, err)
			}
			if out, err := g.sh(ctx, `sed -n 's/^CapEff:[[:space:]]*//p' /proc/$PPID/status`); err != nil || !hasCap(strings.TrimSpace(out), 24) || !hasCap(strings.TrimSpace(out), 21) {
				t.Errorf("the agent's effective capabilities %q (%v) lack CAP_SYS_RESOURCE or CAP_SYS_ADMIN (which the CRNG re-key on resume needs)", out, err)
			}
			pid, err := g.agentPid(ctx)
			if err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			if err := g.killAgent(ctx); err != nil {
				t.Fatalf("kill the agent: %v", err)
			}
			c.Close()
			waitRestarted(t, v.AgentURL(), tv.token, pid, killed, tc.name)

			sctx := opContext(t)
			if err := v.Shutdown(sctx); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			if console := v.SerialTail(); !strings.Contains(console, tc.halted) {
				t.Errorf("console does not end with %q:\n%s", tc.halted, console)
			}
		})
	}
}

// waitRestarted waits until another agent process answers a command with
// the same token.
func waitRestarted(t *testing.T, url, token string, oldPid int, killed time.Time, init string) {
	t.Helper()
	ctx := opContext(t)
	var last error
	for {
		h, err := client.Host{URL: url, Token: token}.Health(ctx)
		if err == nil && h.UptimeMs < time.Since(killed).Milliseconds() {
			break
		}
		last = err
		select {
		case <-ctx.Done():
			t.Fatalf("agent not back within %s: last health %+v, %v", opTimeout, h, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
	timings.add(t, "agent killed to /health 200 again ("+init+")", time.Since(killed))
	c := dial(t, ctx, url, token, client.Options{})
	pid, err := guest{c}.agentPid(ctx)
	if err != nil {
		t.Fatalf("the restarted agent refuses the token or the command: %v", err)
	}
	if pid == oldPid {
		t.Errorf("agent pid still %d after it was killed", pid)
	}
	c.Close()
}

// hasCap reports whether a hex capability mask (as /proc/PID/status shows
// it) has capability bit c.
func hasCap(mask string, c uint) bool {
	m, err := strconv.ParseUint(mask, 16, 64)
	return err == nil && m&(1<<c) != 0
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }
