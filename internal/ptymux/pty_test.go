package ptymux_test

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/rayito/rayito-agent/internal/ptymux"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

func TestTypedCommandRuns(t *testing.T) {
	t.Parallel()
	tm := start(t, newManager(t), shell())
	tm.typ("echo $((6*7))\r")
	tm.waitFor("42\r\n")
	tm.typ("exit\r")
	wantExit(t, tm.waitEnd(), 0)
}

func TestTTYIsAPseudoTerminal(t *testing.T) {
	t.Parallel()
	tm := start(t, newManager(t), ptymux.Options{Argv: []string{"tty"}})
	wantExit(t, tm.waitEnd(), 0)
	if !regexp.MustCompile(`^/dev/pts/\d+\r\n$`).Match(tm.out) {
		t.Fatalf("tty printed %q", tm.out)
	}
}

func TestResizeReachesTheProgram(t *testing.T) {
	t.Parallel()
	o := shell()
	o.Cols, o.Rows = 100, 30
	tm := start(t, newManager(t), o)
	tm.typ("stty size\r")
	tm.waitFor("30 100\r\n")

	if err := tm.p.Resize(132, 43); err != nil {
		t.Fatal(err)
	}
	if c, r := tm.p.Size(); c != 132 || r != 43 {
		t.Fatalf("Size() = %dx%d", c, r)
	}
	tm.typ("stty size\r")
	tm.waitFor("43 132\r\n")
}

func TestResizeSendsSIGWINCH(t *testing.T) {
	t.Parallel()
	tm := start(t, newManager(t), ptymux.Options{Argv: []string{"bash", "--norc", "--noprofile", "-c",
		`trap 'echo winch; stty size' WINCH; echo ready; while :; do sleep 0.05; done`}})
	tm.waitFor("ready\r\n")
	if err := tm.p.Resize(90, 20); err != nil {
		t.Fatal(err)
	}
	tm.waitFor("winch\r\n20 90\r\n")
}

func TestDefaultSize(t *testing.T) {
	t.Parallel()
	tm := start(t, newManager(t), ptymux.Options{Argv: []string{"stty", "size"}})
	wantExit(t, tm.waitEnd(), 0)
	if string(tm.out) != "24 80\r\n" {
		t.Fatalf("stty size printed %q", tm.out)
	}
}

// An interrupt reaches the foreground job, which bash runs in its own
// process group: signalling the shell's group would not stop it.
func TestInterruptStopsForegroundJob(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		interrupt func(tm *term) error
	}{
		{"ctrl-c", func(tm *term) error { return tm.p.WriteInput([]byte{0x03}) }},
		{"signal", func(tm *term) error { return tm.p.Signal(syscall.SIGINT, true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tm := start(t, newManager(t), shell())
			tm.typ("sleep 100\r")
			sleep := waitChild(t, tm.s.Pid, "sleep")
			if err := tc.interrupt(tm); err != nil {
				t.Fatal(err)
			}
			// Typed while sleep runs, so it only shows if sleep is gone.
			tm.typ("echo alive-$((40+2))\r")
			tm.waitFor("alive-42\r\n")
			if alive(sleep) {
				t.Fatalf("sleep %d survived the interrupt", sleep)
			}
			if tm.s.Ended() != nil {
				t.Fatalf("the shell ended: %+v", tm.s.Ended())
			}
		})
	}
}

func TestSignalProgramOnly(t *testing.T) {
	t.Parallel()
	tm := start(t, newManager(t), shell())
	tm.typ("echo u\"\"p\r")
	tm.waitFor("up\r\n")
	if err := tm.p.Signal(syscall.SIGKILL, false); err != nil {
		t.Fatal(err)
	}
	e := tm.waitEnd()
	if e.Reason != stream.ReasonExit || e.ExitCode != nil || e.Signal != "SIGKILL" {
		t.Fatalf("end %+v, want killed by SIGKILL", e)
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	tm := start(t, newManager(t), shell())
	tm.typ("exit 3\r")
	wantExit(t, tm.waitEnd(), 3)
}

func TestFullScreenProgram(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		argv []string
		want []string
	}{
		{"batch", []string{"top", "-b", "-n", "1"}, []string{"top - ", "PID", "%Cpu"}},
		// Screen mode needs a terminal and a TERM it knows.
		{"screen", []string{"top", "-n", "1"}, []string{"\x1b[", "PID", "%Cpu"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tm := start(t, newManager(t), ptymux.Options{Argv: tc.argv, Cols: 120, Rows: 40})
			wantExit(t, tm.waitEnd(), 0)
			for _, w := range tc.want {
				if !strings.Contains(string(tm.out), w) {
					t.Errorf("no %q in output:\n%q", w, tail(tm.out))
				}
			}
		})
	}
}

// Input from several writers arrives whole and, per writer, in order.
func TestInputOrder(t *testing.T) {
	t.Parallel()
	tm := start(t, newManager(t), ptymux.Options{Argv: []string{"sh", "-c", "stty -echo; echo ready; exec cat"}})
	tm.waitFor("ready\r\n")
	const writers, lines = 4, 300
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range lines {
				if err := tm.p.WriteInput(fmt.Appendf(nil, "w%d-%d\n", w, i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for w := range writers {
		tm.typ(fmt.Sprintf("done-%d\n", w))
	}
	for w := range writers {
		tm.waitFor(fmt.Sprintf("done-%d\r\n", w))
	}
	next := make([]int, writers)
	for _, l := range strings.Split(strings.TrimSuffix(string(tm.out[len("ready\r\n"):]), "\r\n"), "\r\n") {
		var w, i int
		if strings.HasPrefix(l, "done-") {
			continue
		}
		if _, err := fmt.Sscanf(l, "w%d-%d", &w, &i); err != nil || w >= writers || i != next[w] {
			t.Fatalf("line %q out of order (next %v)", l, next)
		}
		next[w]++
	}
	for w, n := range next {
		if n != lines {
			t.Fatalf("writer %d: %d lines arrived, want %d", w, n, lines)
		}
	}
}

// A program that does not read gets 1 MiB of queued input, then refusals.
func TestInputLimit(t *testing.T) {
	t.Parallel()
	tm := start(t, newManager(t), ptymux.Options{Argv: []string{"sh", "-c", "stty raw -echo; echo ready; exec sleep 100"}})
	tm.waitFor("ready")
	chunk := make([]byte, 64<<10)
	var err error
	for i := 0; i < 128 && err == nil; i++ {
		err = tm.p.WriteInput(chunk)
	}
	wantWireError(t, err, wire.CodeLimit, "input queue is full")
	if err := tm.p.Signal(syscall.SIGKILL, true); err != nil {
		t.Fatal(err)
	}
	if e := tm.waitEnd(); e.Signal != "SIGKILL" {
		t.Fatalf("end %+v", e)
	}
}

func TestCloseInputUnsupported(t *testing.T) {
	t.Parallel()
	tm := start(t, newManager(t), shell())
	wantWireError(t, tm.p.CloseInput(), wire.CodeUnsupported, "close_stdin does not apply to a pty")
	tm.typ("echo still-$((1+1))\r")
	tm.waitFor("still-2\r\n")
}
