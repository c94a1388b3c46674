package jupyter

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/rayito/rayito-agent/internal/stream"
)

// waitingCell runs input() on k with a cell queued behind it, and returns
// both once the input_request arrived.
func waitingCell(t *testing.T, k *Kernel) (waiting *stream.Stream, r *reader, queued *stream.Stream) {
	t.Helper()
	waiting, _ = execute(t, k.ID(), "answer = input('go? ')\nprint('got', answer)", 0, true)
	queued, _ = execute(t, k.ID(), "print('queued ran')", 0, false)
	r = attach(t, waiting, 0)
	if ev, end := r.next(); end != nil || ev.Type != "input_request" || ev.Prompt != "go? " {
		t.Fatalf("want an input_request, got %+v %+v", ev, end)
	}
	return waiting, r, queued
}

// TestWaitingForInput: a cell waiting in input() is interrupted,
// restarted, killed and shut down; each time it and the cell queued
// behind it end with a status that says what happened, and an
// input_reply to it afterwards is a conflict.
func TestWaitingForInput(t *testing.T) {
	t.Parallel()
	k := startKernel(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()

	// Interrupt: the input() raises, the queued cell still runs.
	s, r, queued := waitingCell(t, k)
	if err := env.mgr.Interrupt(k.ID()); err != nil {
		t.Fatal(err)
	}
	evs, end := r.all()
	wantStatus(t, end, StatusError)
	if e, ok := find(evs, "error"); !ok || e.Name != "KeyboardInterrupt" {
		t.Fatalf("interrupted input(): %+v", evs)
	}
	wantCode(t, env.mgr.InputReply(s.ID, "late"), "conflict")
	evs, end = attach(t, queued, 0).all()
	wantStatus(t, end, StatusOK)
	if stdout(evs) != "queued ran\n" {
		t.Fatalf("cell after the interrupted one: %+v", evs)
	}

	// Restart: the waiting cell ends error, the queued one aborted.
	s, r, queued = waitingCell(t, k)
	if err := env.mgr.Restart(ctx, k.ID()); err != nil {
		t.Fatal(err)
	}
	_, end = r.all()
	wantStatus(t, end, StatusError)
	if !strings.Contains(end.Message, "restarted") {
		t.Fatalf("end message %q", end.Message)
	}
	_, end = attach(t, queued, 0).all()
	wantStatus(t, end, StatusAborted)
	wantCode(t, env.mgr.InputReply(s.ID, "late"), "conflict")

	// SIGKILL: the waiting cell gets KernelDied, the kernel is dead.
	s, r, queued = waitingCell(t, k)
	pid := k.Info().Pid
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	evs, end = r.all()
	wantStatus(t, end, StatusError)
	want := fmt.Sprintf("kernel %s died (killed by SIGKILL)", k.ID())
	if e, ok := find(evs, "error"); !ok || e.Name != "KernelDied" || end.Message != want {
		t.Fatalf("killed while waiting for input: %+v, end %+v; want %q", evs, end, want)
	}
	_, end = attach(t, queued, 0).all()
	wantStatus(t, end, StatusAborted)
	wantCode(t, env.mgr.InputReply(s.ID, "late"), "conflict")
	if st := kernelState(env.mgr, k.ID()); st != StateDead {
		t.Fatalf("state %s, want dead", st)
	}

	// Shutdown: both end closed, and the process is gone.
	if err := env.mgr.Restart(ctx, k.ID()); err != nil {
		t.Fatal(err)
	}
	s, r, queued = waitingCell(t, k)
	pid = k.Info().Pid
	if err := env.mgr.Shutdown(ctx, k.ID()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*stream.Stream{s, queued} {
		if end := c.Ended(); end == nil || end.Reason != stream.ReasonClosed {
			t.Fatalf("cell %d after shutdown: %+v, want closed", c.ID, end)
		}
	}
	wantCode(t, env.mgr.InputReply(s.ID, "late"), "conflict")
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Fatalf("kernel process %d still exists after shutdown: %v", pid, err)
	}
}

// TestFastOutputEveryLineOnce: a cell that prints 200,000 lines as fast
// as it can ends with every line once, in order.
func TestFastOutputEveryLineOnce(t *testing.T) {
	t.Parallel()
	k := sharedKernel(t)
	const lines = 200000
	evs, end := run(t, k.ID(), fmt.Sprintf("for i in range(%d):\n    print('line', i)", lines))
	wantStatus(t, end, StatusOK)
	var want strings.Builder
	for i := range lines {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if got := stdout(evs); got != want.String() {
		n := 0
		for n < min(len(got), want.Len()) && got[n] == want.String()[n] {
			n++
		}
		t.Fatalf("got %d bytes in %d events, want %d bytes; first difference at byte %d", len(got), len(evs), want.Len(), n)
	}
}

// TestKernelDiesAsCellSendFails: a cell whose send reports failure only
// after the kernel got it (asked for input) and died ends as a cell the
// kernel died under, not as one that could not be sent.
func TestKernelDiesAsCellSendFails(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	m := NewManager(Options{Registry: env.reg, Reaper: env.mgr.reaper})
	defer m.Close()
	m.lose = &losses{}
	k, err := m.Start(ctx, StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.lose.lateExecute.Store(true)
	s, _, err := m.Execute(ctx, k.ID(), "answer = input('go? ')", 0, true)
	if err != nil {
		t.Fatal(err)
	}
	r := attach(t, s, 0)
	if ev, end := r.next(); end != nil || ev.Type != "input_request" {
		t.Fatalf("want an input_request, got %+v %+v", ev, end)
	}
	if err := syscall.Kill(k.Info().Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	evs, end := r.all()
	want := fmt.Sprintf("kernel %s died (killed by SIGKILL)", k.ID())
	if e, ok := find(evs, "error"); !ok || e.Name != "KernelDied" || end.Message != want {
		t.Fatalf("cell: %+v, end %+v; want KernelDied and %q", evs, end, want)
	}
}
