package proc

import (
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// execAtPid starts argv so that it gets pid want, the number of a process
// group that has died, the way pid reuse would (pid_max is 32768 on small
// machines). It sets the kernel's last pid just below want; another fork
// on the machine may take the number first, so it retries.
func execAtPid(t *testing.T, m *Manager, want int, argv ...string) *stream.Stream {
	t.Helper()
	for range 50 {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(want-1)), 0); err != nil {
			t.Skipf("cannot choose the next pid here: %v", err)
		}
		s, err := m.Exec(ExecOptions{Spec: Spec{Argv: argv}})
		if err != nil {
			t.Fatal(err)
		}
		if s.Pid == want {
			return s
		}
		s.Control.(*process).Signal(syscall.SIGKILL, true)
		<-s.Done()
	}
	t.Skipf("pid %d was always taken by someone else", want)
	return nil
}

// endOf waits for a stream's end.
func endOf(t *testing.T, s *stream.Stream) stream.End {
	t.Helper()
	select {
	case <-s.Done():
		return *s.Ended()
	case <-time.After(30 * time.Second):
		t.Fatalf("stream %d did not end", s.ID)
		return stream.End{}
	}
}

// TestGroupSignalAfterGroupDied: a command whose leader exited but whose
// stream is still draining (a daemon it started holds stdout) is signalled
// for its group; its pid now belongs to another command's session, which
// must not get the signal.
func TestGroupSignalAfterGroupDied(t *testing.T) {
	m := testManager(t)
	// The daemon leaves the group with setsid and writes for a while, so
	// the stream stays open after the leader's exit.
	a, err := m.Exec(ExecOptions{Spec: Spec{Argv: []string{"sh", "-c",
		`setsid sh -c 'for i in 1 2 3 4 5 6 7 8 9 10; do echo bg; sleep 0.3; done' & echo leader`}}})
	if err != nil {
		t.Fatal(err)
	}
	pa := a.Control.(*process)
	select {
	case <-pa.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("leader did not exit")
	}
	if a.Ended() != nil {
		t.Fatal("stream ended before the test could signal it; the daemon should hold it open")
	}
	victim := execAtPid(t, m, a.Pid, "sleep", "30")
	if err := pa.Signal(syscall.SIGKILL, true); err != nil {
		t.Fatalf("signal to a group that is gone: %v", err)
	}
	endOf(t, a)
	// Close must still see the victim as running, though a's stream
	// ended under the same pid, and end it with SIGTERM.
	m.Close()
	if e := endOf(t, victim); e.Signal != "SIGTERM" {
		t.Errorf("the command that got the old pid ended with %+v, want SIGTERM from Close", e)
	}
}

// TestTimeoutKillSparesReusedPid: after a timeout, the SIGKILL that follows
// SIGTERM by KillGrace must not reach a command that got the pid of the
// group meanwhile.
func TestTimeoutKillSparesReusedPid(t *testing.T) {
	reg := stream.NewRegistry(0)
	defer reg.Close()
	m := testManager(t)
	other := NewManager(reg, sharedReaper, &Defaults{}, nil)
	defer other.Close()

	start := time.Now()
	a, err := m.Exec(ExecOptions{Spec: Spec{Argv: []string{"sleep", "30"}}, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if e := endOf(t, a); e.Signal != "SIGTERM" {
		t.Fatalf("end %+v, want SIGTERM", e)
	}
	victim := execAtPid(t, other, a.Pid, "sleep", "30")
	m.Close() // waits for what it owns
	if d := KillGrace + time.Second - time.Since(start); d > 0 {
		time.Sleep(d) // and for what it might not own
	}
	if e := victim.Ended(); e != nil {
		t.Fatalf("the command that got the old pid ended: %+v", e)
	}
	victim.Control.(*process).Signal(syscall.SIGTERM, true)
	endOf(t, victim)
}

// TestSignalAfterEnd: once the stream has ended, signal is conflict, even
// for a caller that checked the stream a moment before it ended.
func TestSignalAfterEnd(t *testing.T) {
	m := testManager(t)
	s, err := m.Exec(ExecOptions{Spec: Spec{Argv: []string{"true"}}})
	if err != nil {
		t.Fatal(err)
	}
	endOf(t, s)
	for _, group := range []bool{true, false} {
		if err := s.Control.(*process).Signal(syscall.SIGTERM, group); wire.AsError(err).Code != wire.CodeConflict {
			t.Errorf("group %v: %v, want conflict", group, err)
		}
	}
}
