package jupyter

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/rayito/rayito-agent/internal/stream"
)

// The tests in this file are not parallel: they count the kernel
// processes, descriptors and connection dirs the package leaves behind.

// TestRestartDuringStart: restarts that come while the kernel starts, two
// at once, wait for the start and leave exactly one kernel process; a
// cell sent while the kernel restarts runs on the new process.
func TestRestartDuringStart(t *testing.T) {
	before := beforeLeakCheck(t)
	id, started := startAsync(t, env.mgr, "")
	restarted := make(chan error, 2)
	for range 2 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			restarted <- env.mgr.Restart(ctx, id)
		}()
	}
	if err := waitDone(t, started); err != nil {
		t.Fatalf("start: %v", err)
	}
	for range 2 {
		if err := waitDone(t, restarted); err != nil {
			t.Fatalf("restart: %v", err)
		}
	}
	k, err := env.mgr.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.mgr.Shutdown(context.Background(), id) })
	now := snapshotResources(t)
	extra := slices.DeleteFunc(now.procs, func(p int) bool { return slices.Contains(before.procs, p) })
	if len(extra) != 1 || extra[0] != k.Info().Pid {
		t.Fatalf("kernel processes %v after a start and two restarts; want only the kernel's, %d", extra, k.Info().Pid)
	}

	again := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		again <- env.mgr.Restart(ctx, id)
	}()
	waitState(t, id, StateStarting)
	s, _ := execute(t, id, "import os\nprint(os.getpid())", 0, false)
	if err := waitDone(t, again); err != nil {
		t.Fatal(err)
	}
	evs, end := attach(t, s, 0).all()
	wantStatus(t, end, StatusOK)
	if want := fmt.Sprintf("%d\n", k.Info().Pid); stdout(evs) != want {
		t.Fatalf("cell sent during the restart printed pid %q, want the new process's %q", stdout(evs), want)
	}

	if err := env.mgr.Shutdown(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	waitNoLeak(t, before)
}

// TestShutdownDuringStart: Shutdown and Manager.Close return only once
// the starting kernel's process is gone, and cells queued on it end.
func TestShutdownDuringStart(t *testing.T) {
	before := beforeLeakCheck(t)
	dataDir, gate := gatedSpec(t)
	for _, viaClose := range []bool{false, true} {
		m := NewManager(Options{Registry: env.reg, Reaper: env.mgr.reaper, DataDirs: []string{dataDir}})
		id, started := startAsync(t, m, "gated")
		pid := waitPid(t, gate)
		s, _, err := m.Execute(t.Context(), id, "print('never')", 0, false)
		if err != nil {
			t.Fatal(err)
		}
		if viaClose {
			m.Close()
		} else if err := m.Shutdown(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
			t.Fatalf("close %v: the starting kernel's process %d is still there after the shutdown returned (%v)", viaClose, pid, err)
		}
		if err := waitDone(t, started); err == nil {
			t.Fatalf("close %v: a start interrupted by a shutdown succeeded", viaClose)
		}
		_, end := attach(t, s, 0).all()
		if end.Reason != stream.ReasonClosed {
			t.Fatalf("close %v: queued cell ended %+v, want closed", viaClose, end)
		}
		m.Close()
	}
	waitNoLeak(t, before)
}

// TestKilledDuringStart: a kernel killed while it starts fails the start
// with the reason, and the cells queued on it end aborted saying so.
func TestKilledDuringStart(t *testing.T) {
	before := beforeLeakCheck(t)
	dataDir, gate := gatedSpec(t)
	m := NewManager(Options{Registry: env.reg, Reaper: env.mgr.reaper, DataDirs: []string{dataDir}})
	defer m.Close()
	id, started := startAsync(t, m, "gated")
	pid := waitPid(t, gate)
	s, _, err := m.Execute(t.Context(), id, "print('never')", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = waitDone(t, started)
	if err == nil || !strings.Contains(err.Error(), "SIGKILL") {
		t.Fatalf("start of a killed kernel: %v; want an error naming SIGKILL", err)
	}
	_, end := attach(t, s, 0).all()
	wantStatus(t, end, StatusAborted)
	if !strings.Contains(end.Message, "failed to start") || !strings.Contains(end.Message, "SIGKILL") {
		t.Fatalf("queued cell's end message %q does not say the start failed and why", end.Message)
	}
	if _, err := m.Get(id); err == nil {
		t.Fatalf("a kernel that never started is still listed: %+v", m.List())
	}
	waitNoLeak(t, before)
}

// TestFailedRestartEndsQueuedCells: a restart whose new process fails
// makes the kernel dead and ends the cells queued while it restarted.
func TestFailedRestartEndsQueuedCells(t *testing.T) {
	before := beforeLeakCheck(t)
	dataDir, gate := gatedSpec(t)
	m := NewManager(Options{Registry: env.reg, Reaper: env.mgr.reaper, DataDirs: []string{dataDir}})
	defer m.Close()
	id, started := startAsync(t, m, "gated")
	waitPid(t, gate)
	if err := waitDone(t, started); err != nil {
		t.Fatal(err)
	}
	running, _, err := m.Execute(t.Context(), id, "import time\nprint('sleeping', flush=True)\ntime.sleep(600)", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	r := attach(t, running, 0)
	r.untilStdout("sleeping\n")

	touch(t, filepath.Join(gate, "fail"))
	restarted := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		restarted <- m.Restart(ctx, id)
	}()
	_, end := r.all()
	wantStatus(t, end, StatusError)
	pid := waitPid(t, gate) // the new process started, and hangs
	queued, _, err := m.Execute(t.Context(), id, "print('never')", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	touch(t, filepath.Join(gate, "release"))
	if err := waitDone(t, restarted); err == nil || !strings.Contains(err.Error(), "exit code 3") {
		t.Fatalf("restart whose process exited 3: %v", err)
	}
	_, end = attach(t, queued, 0).all()
	wantStatus(t, end, StatusAborted)
	if !strings.Contains(end.Message, "could not be restarted") {
		t.Fatalf("queued cell's end message %q does not say the restart failed", end.Message)
	}
	if st := kernelState(m, id); st != StateDead {
		t.Fatalf("state %s after a failed restart, want dead", st)
	}
	_, _, err = m.Execute(t.Context(), id, "1", 0, false)
	wantCode(t, err, "conflict")
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Fatalf("failed process %d still exists: %v", pid, err)
	}

	// Restarted again, with the gate open, it works.
	os.Remove(filepath.Join(gate, "fail"))
	if err := m.Restart(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	s, _, err := m.Execute(t.Context(), id, "print(6 * 7)", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	evs, end := attach(t, s, 0).all()
	wantStatus(t, end, StatusOK)
	if stdout(evs) != "42\n" {
		t.Fatalf("after the restart: %+v", evs)
	}
	if err := m.Shutdown(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	waitNoLeak(t, before)
}

func kernelState(m *Manager, id string) State {
	for _, info := range m.List() {
		if info.Kernel == id {
			return info.State
		}
	}
	return State("absent " + strconv.Quote(id))
}
