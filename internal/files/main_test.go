package files

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
)

// init keeps the main goroutine on the process's main thread, so that no
// test's goroutine runs there: the runtime parks that thread for good
// instead of ending it when a goroutine locked to it ends, and
// TestFailedSwitchBackRetiresThread checks that its thread ends.
func init() { runtime.LockOSThread() }

// TestMain fails the run if goroutines outlive the tests: transfers and
// worker threads must all end with their manager.
func TestMain(m *testing.M) {
	before := runtime.NumGoroutine()
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(waitLong)
		n := runtime.NumGoroutine()
		for n > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			n = runtime.NumGoroutine()
		}
		if n > before {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			fmt.Fprintf(os.Stderr, "goroutine leak: %d before, %d after\n%s\n", before, n, buf)
			code = 1
		}
	}
	os.Exit(code)
}
