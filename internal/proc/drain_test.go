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
