package resume

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTimedOutHookDiesWithItsChildren: a hook past its timeout is killed
// with every process it started (its process group), so nothing it began
// runs on into the freeze, the snapshot and every clone.
func TestTimedOutHookDiesWithItsChildren(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	dir := hookTree(t, HookPrePause, map[string]string{
		"1-flush": "sleep 600 & echo $! > " + pidFile + "; wait",
	})
	h := &Hooks{Dir: dir, Timeout: 2 * time.Second, Spawn: spawnForTest}
	rs := h.Run(context.Background(), HookPrePause, HookEnv{}, nil)
	if len(rs) != 1 || !rs[0].TimedOut {
		t.Fatalf("results: %+v, want the hook timed out", rs)
	}
	b, _ := os.ReadFile(pidFile)
	child, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if child <= 0 {
		t.Fatalf("the hook's child wrote no pid (%q)", b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(child) {
		if time.Now().After(deadline) {
			syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("the timed-out hook's child (pid %d) still runs: only the hook's shell was killed", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive says whether pid runs: it exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
