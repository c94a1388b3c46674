package nodetest

import (
	"bufio"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/proc"
)

// Session is a script kept running between requests: a benchmark asks it
// for one measurement at a time, as a line on its stdin, and reads the
// line it answers. One process serves a whole benchmark, so its
// measurements are of a warm Node (compiled code, an open connection
// pool), as in a long-running client, and not of a process's first calls.
type Session struct {
	t   testing.TB
	in  io.WriteCloser
	out *bufio.Scanner
	pid int
	r   *proc.Reaper
}

// Start runs `node script args...` in dir with env added to the
// environment and keeps it for Ask. The test's cleanup closes the
// script's stdin (its cue to exit) and waits for it; a script still
// running at scriptBound is killed.
func Start(t testing.TB, r *proc.Reaper, dir, script string, env []string, args ...string) *Session {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	pid, exited := spawn(t, r, dir, script, env, [3]*os.File{inR, outW, os.Stderr}, args)
	inR.Close()
	outW.Close()
	out := bufio.NewScanner(outR)
	out.Buffer(nil, 16<<20)
	s := &Session{t: t, in: inW, out: out, pid: pid, r: r}
	t.Cleanup(func() {
		inW.Close()
		bound := time.AfterFunc(scriptBound, func() { r.Kill(pid, syscall.SIGKILL, true) })
		defer bound.Stop()
		if st := <-exited; st.ExitCode() != 0 {
			t.Errorf("node %s %v: %v", script, args, exitError(st))
		}
		outR.Close()
	})
	return s
}

// Ask writes line to the script and returns the line it answers. A
// script that exits or does not answer within scriptBound fails the test.
func (s *Session) Ask(line string) string {
	s.t.Helper()
	if _, err := io.WriteString(s.in, line+"\n"); err != nil {
		s.t.Fatalf("node script: %v", err)
	}
	bound := time.AfterFunc(scriptBound, func() { s.r.Kill(s.pid, syscall.SIGKILL, true) })
	defer bound.Stop()
	if !s.out.Scan() {
		s.t.Fatalf("node script ended without answering %q: %v", line, s.out.Err())
	}
	return s.out.Text()
}
