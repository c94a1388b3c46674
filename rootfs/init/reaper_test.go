package main

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/proc"
)

// Only one Reaper may run per process, so the tests share one; nothing in
// this test binary may use os/exec's Wait.
var (
	reaperOnce   sync.Once
	sharedReaper *proc.Reaper
	reaperErr    error
)

func testReaper(t *testing.T) *proc.Reaper {
	t.Helper()
	reaperOnce.Do(func() { sharedReaper, reaperErr = proc.NewReaper() })
	if reaperErr != nil {
		t.Fatal(reaperErr)
	}
	return sharedReaper
}

// runTool runs argv to completion through the reaper, from the calling
// goroutine's OS thread (which matters inside a network namespace).
func runTool(r *proc.Reaper, argv ...string) error {
	_, exited, err := r.ForkExec(argv[0], argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, os.Stderr.Fd(), os.Stderr.Fd()},
	})
	if err != nil {
		return fmt.Errorf("%v: %w", argv, err)
	}
	select {
	case st := <-exited:
		if st.ExitCode() != 0 {
			return fmt.Errorf("%v: exit %d", argv, st.ExitCode())
		}
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%v: still running after 30s", argv)
	}
}
