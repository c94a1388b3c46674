package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// TestUpgradeAfterResume: a sandbox VM paused, snapshotted and restored,
// resumed by the host, then upgraded to another build as a platform rolls
// an agent out (right after POST /v1/resume): the agent (rayito-init's
// child) freezes user work in its cgroup, execs the new binary in place
// and thaws; the instance and the generation stay, /health shows the new
// version, and a command runs afterwards (user work thawed).
func TestUpgradeAfterResume(t *testing.T) {
	tv := vmConfig(t)
	bin := filepath.Join(t.TempDir(), "rayito-agent")
	build := exec.Command("go", "build", "-trimpath", "-tags", "nethttpomithttp2", "-ldflags=-s -w -X main.version=e2e-upgraded", "-o", bin, "../../cmd/rayito-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the new agent: %v\n%s", err, out)
	}
	newAgent, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	orig := bootHealthy(t, tv.cfg)
	ctx := pauseContext(t)
	host := client.Host{URL: orig.AgentURL(), Token: tv.token}
	quiesce(t, ctx, orig, tv.token, client.PauseOptions{})
	snap := t.TempDir()
	snapshot(t, orig, snap)
	orig.Close()

	v, _ := restoreHealthy(t, t, tv.cfg, snap)
	host = client.Host{URL: v.AgentURL(), Token: tv.token}
	before, err := host.Resume(ctx, client.ResumeOptions{ResumeID: "before-upgrade", TimeUnixNs: time.Now().UnixNano()})
	if err != nil || before.ResumeGeneration != 1 {
		t.Fatalf("resume: %v, %+v", err, before)
	}
	started := time.Now()
	a, err := host.Upgrade(ctx, client.UpgradeOptions{Binary: newAgent, DeadlineMs: 60000,
		Progress: func(msg string) { t.Log(msg) }})
	if err != nil {
		t.Fatalf("upgrade: %v (%+v)", err, a)
	}
	timings.add(t, "upgrade of the agent (13 MiB sent, call to answer)", time.Since(started))
	var names []string
	for _, s := range a.Steps {
		names = append(names, s.Step+"="+s.Status)
	}
	if got, want := strings.Join(names, " "), "check=done freeze=done suspend=done collect=done exec=done adopt=done thaw=done"; got != want {
		t.Fatalf("steps %s, want %s (%+v)", got, want, a.Steps)
	}
	if a.ToVersion != "e2e-upgraded" || a.FromVersion != before.Version || a.FrozenMs <= 0 {
		t.Fatalf("answer %+v", a)
	}
	t.Logf("upgraded %s to %s in %.0f ms, user work frozen %.0f ms", a.FromVersion, a.ToVersion, a.DurationMs, a.FrozenMs)
	h, err := host.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Version != "e2e-upgraded" || h.Instance != before.Instance || h.ResumeGeneration != 1 || h.Upgrades != 1 {
		t.Fatalf("after the upgrade: %+v, before %+v", h, before)
	}
	c := dial(t, ctx, v.AgentURL(), tv.token, client.Options{})
	out, err := guest{c}.sh(ctx, "echo thawed; cat /sys/fs/cgroup/user/cgroup.freeze 2>/dev/null || true")
	if err != nil || !strings.HasPrefix(out, "thawed") {
		t.Fatalf("a command after the upgrade: %q, %v", out, err)
	}
}
