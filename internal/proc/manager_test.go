package proc

import (
	"context"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

// Only one Reaper may run in a process: every test shares this one.
var (
	sharedOnce   sync.Once
	sharedReaper *Reaper
)

// testReaper is the reaper every test of the package shares.
func testReaper(t testing.TB) *Reaper {
	sharedOnce.Do(func() {
		r, err := NewReaper()
		if err != nil {
			t.Fatal(err)
		}
		sharedReaper = r
	})
	return sharedReaper
}

func testManager(t *testing.T) *Manager {
	reg := stream.NewRegistry(0)
	m := NewManager(reg, testReaper(t), &Defaults{}, nil)
	t.Cleanup(func() { m.Close(); reg.Close() })
	return m
}

// readAll reads a stream's stdout to its end, acking as it goes.
func readAll(t *testing.T, s *stream.Stream) (string, stream.End) {
	a, err := s.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out strings.Builder
	for {
		item, err := a.Next(ctx, nil, 1<<16)
		if err == io.EOF {
			t.Fatal("EOF before end")
		}
		if err != nil {
			t.Fatal(err)
		}
		switch item.Kind {
		case stream.ItemData:
			if item.Channel == "stdout" {
				out.Write(item.Data)
			}
		case stream.ItemEnd:
			return out.String(), item.End
		}
	}
}

// TestBackgroundWriterKeepsStreamOpen: output written by a background job
// after the leader's exit still belongs to the command's stream.
func TestBackgroundWriterKeepsStreamOpen(t *testing.T) {
	m := testManager(t)
	s, err := m.Exec(ExecOptions{Spec: Spec{Argv: []string{"sh", "-c", "(for i in 1 2 3 4 5 6; do sleep 0.5; echo bg$i; done) & echo leader"}}})
	if err != nil {
		t.Fatal(err)
	}
	out, end := readAll(t, s)
	if out != "leader\nbg1\nbg2\nbg3\nbg4\nbg5\nbg6\n" {
		t.Fatalf("output %q", out)
	}
	if end.Reason != stream.ReasonExit || end.ExitCode == nil || *end.ExitCode != 0 {
		t.Fatalf("end %+v", end)
	}
}

// TestSilentBackgroundJobDoesNotHoldStream: a job that holds the pipes
// without writing does not keep the stream open, and is not killed by it.
func TestSilentBackgroundJobDoesNotHoldStream(t *testing.T) {
	m := testManager(t)
	s, err := m.Exec(ExecOptions{Spec: Spec{Argv: []string{"sh", "-c", "sleep 60 & echo $!"}}})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := readAll(t, s)
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("output %q", out)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
		t.Fatalf("background job gone after the stream ended: %v", err)
	}
}
