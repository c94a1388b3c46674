package proc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHookStdinHeldByBackgroundJob: a hook exits while a job it started
// keeps its stdin open without reading. RunHook returns and must not leave
// a goroutine blocked writing the rest of the input.
func TestHookStdinHeldByBackgroundJob(t *testing.T) {
	testManager(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	before := runtime.NumGoroutine()
	st, err := sharedReaper.RunHook("exec 3<&0; sleep 30 <&3 3<&- & echo $! >"+pidFile, bytes.Repeat([]byte("x"), 4<<20), 30*time.Second)
	if err != nil || st.ExitCode() != 0 {
		t.Fatalf("RunHook: %+v, %v", st, err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	// Our orphan until reaped, so the pid cannot be reused meanwhile.
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
		defer syscall.Kill(pid, syscall.SIGKILL)
	}
	eventually(t, "goroutines after RunHook", func() (bool, string) {
		n := runtime.NumGoroutine()
		buf := make([]byte, 1<<20)
		return n <= before, fmt.Sprintf("%d goroutines, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	})
}
