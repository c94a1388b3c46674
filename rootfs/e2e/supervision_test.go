package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/rootfs/vm"
)

// TestInitIntegrations boots each init integration and checks that the
// agent answers, comes back after it dies, and that the guest shuts down
// cleanly on ctrl-alt-del.
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
			cfg := vmConfig(t)
			cfg.Init = tc.init
			v, _ := bootHealthy(t, cfg)
			logConsoleOnFailure(t, v)
			ctx := opContext(t)
			before, err := getHealth(ctx, v.AgentURL())
			if err != nil {
				t.Fatal(err)
			}
			ops := opsFor(t, v.AgentURL(), before)
			if err := ops.KillAgent(ctx); err != nil {
				t.Fatalf("kill the agent: %v", err)
			}
			waitRestarted(t, v.AgentURL(), before)

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

// waitRestarted waits until /health answers from another agent instance.
func waitRestarted(t *testing.T, base string, before health) {
	t.Helper()
	ctx := opContext(t)
	started := time.Now()
	for {
		h, err := getHealth(ctx, base)
		if err == nil && h.Instance != before.Instance {
			t.Logf("timing: agent answered again %s after it died", time.Since(started).Round(time.Millisecond))
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("agent not back within %s: last health %+v, %v", opTimeout, h, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }
