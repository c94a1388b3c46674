package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"
)

func newTestSupervisor(t *testing.T, script string) (*supervisor, chan int) {
	starts := make(chan int, 100)
	return &supervisor{
		path:      "/bin/sh",
		argv:      []string{"sh", "-c", script},
		env:       []string{"PATH=/usr/bin:/bin"},
		files:     []uintptr{0, os.Stderr.Fd(), os.Stderr.Fd()},
		reaper:    testReaper(t),
		log:       zaptest.NewLogger(t),
		backoff:   backoff{min: 10 * time.Millisecond, max: 50 * time.Millisecond, stable: time.Minute},
		stopGrace: 300 * time.Millisecond,
		onStart:   func(pid int) { starts <- pid },
	}, starts
}

// runSupervisor runs s until the returned stop function is called, which
// waits for run to return.
func runSupervisor(t *testing.T, s *supervisor) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("supervisor did not return after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func nextStart(t *testing.T, starts <-chan int) int {
	t.Helper()
	select {
	case pid := <-starts:
		return pid
	case <-time.After(10 * time.Second):
		t.Fatal("program was not (re)started")
		return 0
	}
}

func TestSupervisorRestartsAProgramThatDies(t *testing.T) {
	log := filepath.Join(t.TempDir(), "runs")
	s, starts := newTestSupervisor(t, "echo run >> "+log+"; exit 7")
	runSupervisor(t, s)
	pids := map[int]bool{}
	for i := 0; i < 4; i++ {
		pids[nextStart(t, starts)] = true
	}
	if len(pids) != 4 {
		t.Errorf("4 starts reused pids: %v", pids)
	}
	waitFor(t, func() bool {
		b, _ := os.ReadFile(log)
		return strings.Count(string(b), "run\n") >= 4
	})
}

func TestSupervisorStopsTheProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child")
	s, starts := newTestSupervisor(t, "sleep 1000 & echo $! > "+pidFile+"; wait")
	stop := runSupervisor(t, s)
	leader := nextStart(t, starts)
	child := readPid(t, pidFile)
	stop()
	waitGone(t, leader)
	waitGone(t, child)
	select {
	case pid := <-starts:
		t.Errorf("restarted (pid %d) after the context ended", pid)
	default:
	}
}

func TestSupervisorKillsWhatIgnoresSIGTERM(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child")
	s, starts := newTestSupervisor(t, "trap '' TERM; sleep 1000 & echo $! > "+pidFile+"; wait")
	stop := runSupervisor(t, s)
	leader := nextStart(t, starts)
	child := readPid(t, pidFile)
	started := time.Now()
	stop()
	if took := time.Since(started); took < s.stopGrace {
		t.Errorf("stopped after %s, before the %s grace: SIGTERM was not ignored?", took, s.stopGrace)
	}
	waitGone(t, leader)
	waitGone(t, child)
}

func TestSupervisorWaitsForAMissingProgram(t *testing.T) {
	s, starts := newTestSupervisor(t, "")
	s.path = filepath.Join(t.TempDir(), "agent")
	s.argv = []string{s.path}
	runSupervisor(t, s)
	time.Sleep(100 * time.Millisecond) // a few failed starts
	if err := os.WriteFile(s.path, []byte("#!/bin/sh\nexec sleep 1000\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	nextStart(t, starts)
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	waitFor(t, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

// waitGone waits until pid no longer exists (the reaper collects zombies,
// as the child subreaper they are reparented to).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	waitFor(t, func() bool { return errors.Is(unix.Kill(pid, 0), unix.ESRCH) })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
