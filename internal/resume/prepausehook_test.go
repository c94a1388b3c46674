package resume

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPrePauseHookOutlivesThePauseDeadline: a pre-pause hook (a 1 s flush,
// its own timeout 5 s, the pause's deadline 300 ms) is bounded
// by its own timeout, not by the pause's deadline. The answer at the
// deadline says it still runs; it finishes its flush afterwards.
func TestPrePauseHookOutlivesThePauseDeadline(t *testing.T) {
	flushed := filepath.Join(t.TempDir(), "flushed")
	dir := hookTree(t, HookPrePause, map[string]string{"1-flush": "sleep 1; echo done > " + flushed})
	j := &journal{}
	m := journaled(j, false, Options{Machine: Machine{Hooks: &Hooks{Dir: dir, Timeout: 5 * time.Second, Spawn: spawnForTest}}})
	req := pauseReq()
	req.Deadline = 300 * time.Millisecond
	a, err := m.Pause(context.Background(), req)
	if err != nil || !a.DeadlinePassed {
		t.Fatalf("past the deadline: %+v, %v", a, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		p := m.Paused()
		if p == nil {
			t.Fatal("the pause ended by itself")
		}
		if s, ok := stepOf(*p, stepHooks); ok && s.Status != StepRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pause's steps never finished: %+v", p.Steps)
		}
		time.Sleep(10 * time.Millisecond)
	}
	p := m.Paused()
	if len(p.Hooks) != 1 || p.Hooks[0].Killed != "" || p.Hooks[0].TimedOut || p.Hooks[0].ExitCode == nil || *p.Hooks[0].ExitCode != 0 {
		t.Fatalf("the flush hook: %+v; want it run to its end, past the pause's deadline", p.Hooks)
	}
	if b, _ := os.ReadFile(flushed); string(b) != "done\n" {
		t.Fatalf("the flush hook did not finish its flush: %q", b)
	}
	m.Abort()
}
