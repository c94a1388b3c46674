package proctest

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/proc"
)

// Main runs a package's tests, for its TestMain, with a reaper for the
// whole process (only one may run in a process) handed to setup first;
// what setup returns, if not nil, runs after the tests. Tests that passed
// still fail if they left goroutines running: every package built on the
// managers checks that streams, kernels and pumps end.
func Main(m *testing.M, setup func(*proc.Reaper) (teardown func())) int {
	r, err := proc.NewReaper()
	if err != nil {
		fmt.Fprintln(os.Stderr, "reaper:", err)
		return 1
	}
	defer r.Close()
	teardown := setup(r)
	base := runtime.NumGoroutine()
	code := m.Run()
	if teardown != nil {
		teardown()
	}
	if n := settle(base); n > base && code == 0 {
		buf := make([]byte, 1<<20)
		fmt.Fprintf(os.Stderr, "leaked goroutines: %d now, %d before the tests\n%s\n", n, base, buf[:runtime.Stack(buf, true)])
		return 1
	}
	return code
}

// settle waits up to 10 s for the goroutines to come down to base (some
// end a moment after what they served) and returns how many there are.
func settle(base int) int {
	deadline := time.Now().Add(10 * time.Second)
	n := runtime.NumGoroutine()
	for n > base && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}
