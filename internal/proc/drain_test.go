package proc

import (
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

// TestDrainBoundWithStalledClient: a background job keeps writing after
// the leader's exit into a "block" stream whose attached client reads
// nothing. The stream must still end at the drain bound (drainMax after
// the exit), not wait for the client forever.
func TestDrainBoundWithStalledClient(t *testing.T) {
	m := testManager(t)
	m.drainIdle, m.drainMax = 200*time.Millisecond, time.Second
	// yes dies of SIGPIPE once the stream closes its pipes.
	s, err := m.Exec(ExecOptions{Spec: Spec{Argv: []string{"sh", "-c", "yes & exit 0"}}, Buffer: 64 << 10, Overflow: stream.Block, Grace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	select {
	case <-s.Done():
	case <-time.After(20 * time.Second):
		// Let the test end: kill the writer (its group is still alive).
		s.Control.(*process).Signal(syscall.SIGKILL, true)
		t.Fatal("stream still open 20 s after the leader's exit with a 1 s drain bound")
	}
	if e := s.Ended(); e.ExitCode == nil || *e.ExitCode != 0 {
		t.Errorf("end %+v, want the leader's exit code 0", e)
	}
}

// TestCloseDoesNotWaitForFullLogs: shutting the manager down ends a
// command whose block log is full and unread at once, not at the drain
// bound (30 s): its reader waits on the log, not on the pipe, so the
// command's death alone does not end the stream.
func TestCloseDoesNotWaitForFullLogs(t *testing.T) {
	m := testManager(t)
	s, err := m.Exec(ExecOptions{Spec: Spec{Argv: []string{"yes"}}, Buffer: 64 << 10, Overflow: stream.Block})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Attach(nil, 0) // and never reads
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for s.Logs()[0].Stats().End < 64<<10 { // full: yes's reader now waits on the log
		time.Sleep(10 * time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { m.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(drainMax / 2):
		t.Fatalf("Close still waiting %v after it began, with a full log nobody reads (drain bound %v)", drainMax/2, drainMax)
	}
	if e := s.Ended(); e == nil || e.Signal != "SIGTERM" {
		t.Fatalf("end %+v, want the stream ended by the shutdown's SIGTERM", e)
	}
}

// TestCloseKeepsLastWords: what a command prints as the shutdown's
// SIGTERM ends it reaches its stream.
func TestCloseKeepsLastWords(t *testing.T) {
	m := testManager(t)
	s, err := m.Exec(ExecOptions{Spec: Spec{Argv: []string{"sh", "-c", `trap 'echo bye; exit 0' TERM; echo ready; while :; do sleep 0.05; done`}}})
	if err != nil {
		t.Fatal(err)
	}
	for s.Logs()[0].Stats().End < uint64(len("ready\n")) {
		time.Sleep(10 * time.Millisecond)
	}
	m.Close()
	if out, end := readAll(t, s); out != "ready\nbye\n" || end.ExitCode == nil || *end.ExitCode != 0 {
		t.Fatalf("after the shutdown: %q, %+v; want the command's last words and its exit 0", out, end)
	}
}
