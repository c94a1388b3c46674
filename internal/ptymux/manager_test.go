package ptymux_test

import (
	"bytes"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/ptymux"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// checkLines fails unless out is exactly the lines 1..n, each ended by the
// terminal's \r\n.
func checkLines(t *testing.T, out []byte, n int) {
	t.Helper()
	lines := strings.Split(string(out), "\r\n")
	if len(lines) != n+1 || lines[n] != "" {
		t.Fatalf("%d lines, want %d; tail %q", len(lines)-1, n, tail(out))
	}
	for i, l := range lines[:n] {
		if l != strconv.Itoa(i+1) {
			t.Fatalf("line %d is %q", i+1, l)
		}
	}
}

// A reader that detaches and reattaches from its cursor misses nothing and
// sees nothing twice, and the output written just before exit is all there.
func TestReattachFromCursor(t *testing.T) {
	t.Parallel()
	const n = 200000
	first := start(t, newManager(t), ptymux.Options{Argv: []string{"seq", "1", strconv.Itoa(n)}, Buffer: 16 << 20})
	for first.cursor < 400000 {
		first.waitFor("\r\n")
	}
	first.a.Close()

	second := attach(t, first.s, first.cursor)
	wantExit(t, second.waitEnd(), 0)
	if len(first.gaps)+len(second.gaps) > 0 {
		t.Fatalf("gaps: %+v %+v", first.gaps, second.gaps)
	}
	checkLines(t, append(first.out, second.out...), n)
}

// A reader that starts below what is retained is told about the gap first.
func TestEvictedCursorGetsGap(t *testing.T) {
	t.Parallel()
	const n = 200000
	s, err := newManager(t).Start(ptymux.Options{Argv: []string{"seq", "1", strconv.Itoa(n)}, Buffer: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(waitLong):
		t.Fatal("seq did not end")
	}
	for _, from := range []uint64{0, 1000} {
		tm := attach(t, s, from)
		wantExit(t, tm.waitEnd(), 0)
		end := s.Cursors()[ptymux.Channel]
		if len(tm.gaps) != 1 || tm.gaps[0].From != from || tm.gaps[0].To != end-64<<10 {
			t.Fatalf("from %d: gaps %+v, want [%d, %d)", from, tm.gaps, from, end-64<<10)
		}
		if !bytes.HasSuffix(tm.out, []byte("\r\n199999\r\n200000\r\n")) || len(tm.out) != 64<<10 {
			t.Fatalf("from %d: %d bytes after the gap, ending %q", from, len(tm.out), tail(tm.out))
		}
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// Fifty terminals at once keep their output apart, and once they ended no
// descriptor and no goroutine is left. Not parallel: it counts both.
func TestManyPTYsNoLeak(t *testing.T) {
	m := newManager(t)
	warm := start(t, m, ptymux.Options{Argv: []string{"true"}}) // the poller's own descriptors
	warm.waitEnd()
	before := openFDs(t)

	const count = 50
	terms := make([]*term, count)
	for i := range terms {
		terms[i] = start(t, m, shell())
	}
	for i, tm := range terms {
		tm.typ(fmt.Sprintf("echo marker-$((%d+1000))\r", i))
	}
	for i, tm := range terms {
		tm.waitFor(fmt.Sprintf("marker-%d\r\n", i+1000))
		tm.typ("exit\r")
	}
	for i, tm := range terms {
		wantExit(t, tm.waitEnd(), 0)
		for j := range count {
			if j != i && bytes.Contains(tm.out, fmt.Appendf(nil, "marker-%d\r", j+1000)) {
				t.Fatalf("pty %d shows the marker of pty %d", i, j)
			}
		}
		tm.a.Close()
	}

	// Fewer descriptors after is not a leak: the test process's own
	// (the race detector's, a finished test's) may close meanwhile.
	deadline := time.Now().Add(waitLong)
	for openFDs(t) > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if after := openFDs(t); after > before {
		t.Fatalf("%d descriptors open before 50 PTYs, %d after", before, after)
	}
	if stacks := settlePTYGoroutines(); stacks != "" {
		t.Fatalf("goroutines left behind:\n%s", stacks)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    ptymux.Options
		code wire.Code
		msg  string
	}{
		{"unknown user", ptymux.Options{User: "no-such-user-xyz"}, wire.CodeBadRequest, `user "no-such-user-xyz" does not exist`},
		{"missing cwd", ptymux.Options{Cwd: "/no/such/dir"}, wire.CodeBadRequest, `cwd "/no/such/dir"`},
		{"cwd is a file", ptymux.Options{Cwd: file}, wire.CodeBadRequest, "is not a directory"},
		{"missing program", ptymux.Options{Argv: []string{"no-such-program-xyz"}}, wire.CodeBadRequest, "no-such-program-xyz"},
		{"too wide", ptymux.Options{Cols: 10001}, wire.CodeBadRequest, "out of range"},
		{"too tall", ptymux.Options{Rows: 65535}, wire.CodeBadRequest, "out of range"},
		{"negative buffer", ptymux.Options{Buffer: -1}, wire.CodeBadRequest, "buffer"},
		{"huge buffer", ptymux.Options{Buffer: stream.MaxByteCapacity + 1}, wire.CodeBadRequest, "buffer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := m.Start(tc.o)
			if s != nil {
				t.Fatalf("stream %d started", s.ID)
			}
			wantWireError(t, err, tc.code, tc.msg)
		})
	}

	t.Run("size", func(t *testing.T) {
		wantWireError(t, ptymux.CheckSize(70000, 24), wire.CodeBadRequest, "70000x24 is out of range")
		tm := start(t, m, shell())
		for _, sz := range [][2]uint16{{0, 0}, {0, 24}, {80, 0}, {10001, 24}, {80, 60000}} {
			wantWireError(t, tm.p.Resize(sz[0], sz[1]), wire.CodeBadRequest, "out of range")
		}
		if c, r := tm.p.Size(); c != 80 || r != 24 {
			t.Fatalf("size changed to %dx%d by refused resizes", c, r)
		}
	})

	t.Run("ended", func(t *testing.T) {
		tm := start(t, m, ptymux.Options{Argv: []string{"true"}})
		tm.waitEnd()
		msg := fmt.Sprintf("pty %d has ended", tm.s.ID)
		wantWireError(t, tm.p.WriteInput([]byte("x")), wire.CodeConflict, msg)
		wantWireError(t, tm.p.Resize(100, 40), wire.CodeConflict, msg)
		wantWireError(t, tm.p.Signal(syscall.SIGINT, true), wire.CodeConflict, msg)
		wantWireError(t, tm.p.Signal(syscall.SIGTERM, false), wire.CodeConflict, msg)
	})
}

// Without argv the user's login shell runs, as a login shell.
func TestLoginShell(t *testing.T) {
	t.Parallel()
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	want := ptymux.LoginShell("/etc/passwd", me.Username)
	tm := start(t, newManager(t), ptymux.Options{Env: map[string]string{"HISTFILE": ""}})
	tm.typ(`shopt -q login_shell && echo "login:$TERM:$SHELL"` + "\r")
	tm.waitFor("login:xterm-256color:" + want + "\r\n")

	// Read only now: before its exec the child still shows the agent's argv.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", tm.s.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(bytes.TrimSuffix(cmdline, []byte{0})); got != "-"+filepath.Base(want) {
		t.Fatalf("argv[0] is %q, want -%s", got, filepath.Base(want))
	}
	if len(tm.s.Argv) != 1 || tm.s.Argv[0] != "-"+filepath.Base(want) {
		t.Fatalf("stream argv %q", tm.s.Argv)
	}
}

func TestEnvUserCwd(t *testing.T) {
	t.Parallel()
	dir := "/usr" // nobody may enter it
	tm := start(t, newManager(t), ptymux.Options{
		Argv: []string{"sh", "-c", `echo "$TERM $FOO $(pwd) $(id -un) $(stat -c %U "$(tty)")"`},
		Env:  map[string]string{"TERM": "vt100", "FOO": "bar"},
		User: "nobody", Cwd: dir,
	})
	wantExit(t, tm.waitEnd(), 0)
	if want := "vt100 bar " + dir + " nobody nobody\r\n"; string(tm.out) != want {
		t.Fatalf("printed %q, want %q", tm.out, want)
	}
}

// A background job that keeps the terminal open does not keep the stream
// from ending, and what the shell printed before exiting is kept.
func TestDrainBoundedByBackgroundJob(t *testing.T) {
	t.Parallel()
	// The job ignores the SIGHUP the shell's exit sends to its group; the
	// trap is set before the fork so the job cannot die before setting it.
	tm := start(t, newManager(t), ptymux.Options{Argv: []string{"bash", "--norc", "--noprofile", "-c",
		`trap '' HUP; sleep 60 & echo "bg=$!"; echo bye`}})
	e := tm.waitEnd()
	wantExit(t, e, 0)
	match := regexp.MustCompile(`^bg=(\d+)\r\nbye\r\n$`).FindSubmatch(tm.out)
	if match == nil {
		t.Fatalf("output %q", tm.out)
	}
	bg, _ := strconv.Atoi(string(match[1]))
	t.Cleanup(func() { syscall.Kill(bg, syscall.SIGKILL) })
	if !alive(bg) {
		t.Fatalf("the background job %d is gone, so the drain bound was not exercised", bg)
	}
}

// Close hangs up every terminal: shells exit on SIGHUP, programs that
// ignore it are killed, and every stream ends.
func TestCloseHangsUp(t *testing.T) {
	m := newManager(t)
	m.SetTimings(ptymux.DrainTimeout, time.Second, ptymux.KillGrace)
	sh := start(t, m, shell())
	stubborn := start(t, m, ptymux.Options{Argv: []string{"bash", "--norc", "--noprofile", "-c",
		`trap '' HUP; echo ready; sleep 1000`}})
	sh.typ("echo u\"\"p\r")
	sh.waitFor("up\r\n")
	stubborn.waitFor("ready\r\n")
	sleep := waitChild(t, stubborn.s.Pid, "sleep")

	m.Close()
	if e := sh.waitEnd(); e.Reason != stream.ReasonExit || e.Signal != "SIGHUP" {
		t.Fatalf("shell end %+v, want SIGHUP", e)
	}
	if e := stubborn.waitEnd(); e.Reason != stream.ReasonExit || e.Signal != "SIGKILL" {
		t.Fatalf("stubborn end %+v, want SIGKILL", e)
	}
	deadline := time.Now().Add(waitLong)
	for alive(sleep) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(sleep) {
		t.Fatalf("sleep %d survived Close", sleep)
	}
	_, err := m.Start(shell())
	wantWireError(t, err, wire.CodeUnavailable, "shutting down")
	if stacks := settlePTYGoroutines(); stacks != "" {
		t.Fatalf("goroutines left behind:\n%s", stacks)
	}
}
