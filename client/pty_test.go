package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// term reads a terminal's output in the background and lets a test wait
// for text to appear after what it already matched.
type term struct {
	p       *client.PTY
	mu      sync.Mutex
	out     []byte
	pos     int // output before pos was matched already
	err     error
	changed chan struct{}
}

func newTerm(p *client.PTY) *term {
	tm := &term{p: p, changed: make(chan struct{})}
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := p.Output().Read(buf)
			var gap *client.GapError
			if errors.As(err, &gap) {
				err = nil // recorded in Gaps; tests check them
			}
			tm.mu.Lock()
			tm.out = append(tm.out, buf[:n]...)
			tm.err = err
			close(tm.changed)
			tm.changed = make(chan struct{})
			tm.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return tm
}

func (tm *term) send(s string) error {
	_, err := tm.p.Write([]byte(s))
	return err
}

// expect waits until s appears in the output after the last match.
func (tm *term) expect(s string) error {
	return tm.expectRE(regexp.MustCompile(regexp.QuoteMeta(s)), s)
}

// expectLine waits for a line that is exactly s: what a command printed,
// not the echo of the command line that computes it. A line may start
// after the escape sequences a shell writes around a command.
func (tm *term) expectLine(s string) error {
	return tm.expectRE(regexp.MustCompile(`[\r\n]`+regexp.QuoteMeta(s)+`\r\n`), s)
}

func (tm *term) expectRE(re *regexp.Regexp, s string) error {
	deadline := time.NewTimer(waitLong)
	defer deadline.Stop()
	for {
		tm.mu.Lock()
		if loc := re.FindIndex(tm.out[tm.pos:]); loc != nil {
			tm.pos += loc[1]
			tm.mu.Unlock()
			return nil
		}
		ch, err, tail := tm.changed, tm.err, tm.out[max(0, len(tm.out)-300):]
		tm.mu.Unlock()
		if err != nil {
			return fmt.Errorf("output ended (%v) before %q; it ends with %q", err, s, tail)
		}
		select {
		case <-ch:
		case <-deadline.C:
			return fmt.Errorf("no %q in the terminal's output; it ends with %q", s, tail)
		}
	}
}

// ended waits for the output to end and returns the error that ended it.
func (tm *term) ended() error {
	for {
		tm.mu.Lock()
		ch, err := tm.changed, tm.err
		tm.mu.Unlock()
		if err != nil {
			return err
		}
		select {
		case <-ch:
		case <-time.After(waitLong):
			return errors.New("the output did not end")
		}
	}
}

// plainShell is bash without startup files: many at once would queue on
// whatever a login profile does (this machine's rehashes pyenv under a
// lock). TestPTYShell runs the real login shell.
var plainShell = []string{"/bin/bash", "--noprofile", "--norc"}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// childNamed returns the pid of a child of pid whose command is comm, or 0.
func childNamed(pid int, comm string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0
	}
	for _, f := range strings.Fields(string(b)) {
		child, _ := strconv.Atoi(f)
		c, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", child))
		if err == nil && strings.TrimSpace(string(c)) == comm {
			return child
		}
	}
	return 0
}

// TestPTYShell: a login shell in a terminal computes, reports its size
// after a resize, survives Ctrl-C and a signal that interrupt its job, and
// its exit code comes back.
func TestPTYShell(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{})
	ctx := ctxLong(t)
	p, err := c.PTY(ctx, client.PTYOptions{Cols: 100, Rows: 30})
	must(t, err)
	if p.Pid() == 0 || p.Stream() == 0 {
		t.Fatalf("pid %d, stream %d", p.Pid(), p.Stream())
	}
	tm := newTerm(p)
	must(t, tm.send("echo $((6*7))\r"))
	must(t, tm.expectLine("42"))
	must(t, tm.send("stty size\r"))
	must(t, tm.expectLine("30 100"))
	must(t, p.Resize(ctx, 132, 43))
	must(t, tm.send("stty size\r"))
	must(t, tm.expectLine("43 132"))

	// Ctrl-C reaches the job in the foreground, not the shell.
	interrupted := func(stop func() error) {
		t.Helper()
		must(t, tm.send("sleep 100\r"))
		var sleep int
		eventually(t, "sleep runs in the terminal", func() bool { sleep = childNamed(p.Pid(), "sleep"); return sleep > 0 })
		must(t, stop())
		eventually(t, "sleep was interrupted", func() bool { return !procAlive(sleep) })
		must(t, tm.send("echo alive$((1+1))\r"))
		must(t, tm.expectLine("alive2"))
	}
	interrupted(func() error { return tm.send("\x03") })
	interrupted(func() error { return p.Signal(ctx, client.SIGINT) })

	must(t, tm.send("exit 3\r"))
	st, err := p.Wait(ctx)
	if err != nil || st.ExitCode() != 3 {
		t.Fatalf("wait: %v %v, want exit code 3", st, err)
	}
	if err := tm.ended(); err != io.EOF {
		t.Fatalf("output ended with %v, want io.EOF", err)
	}
	if len(p.Gaps()) != 0 {
		t.Fatalf("gaps %v", p.Gaps())
	}
}

// TestPTYAttachSecondClient: another client attaches to a running
// terminal, gets its whole output replayed, types into it, and both see
// the answer; the first one's Detach leaves the terminal running.
func TestPTYAttachSecondClient(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	c1, c2 := a.dial(t, client.Options{}), a.dial(t, client.Options{})
	ctx := ctxLong(t)
	p1, err := c1.PTY(ctx, client.PTYOptions{Argv: plainShell, Tag: "shared-term"})
	must(t, err)
	tm1 := newTerm(p1)
	must(t, tm1.send("echo first$((1+1))\r"))
	must(t, tm1.expectLine("first2"))

	p2, err := c2.AttachPTY(ctx, client.AttachOptions{Tag: "shared-term"})
	must(t, err)
	if p2.Stream() != p1.Stream() || p2.Pid() != p1.Pid() {
		t.Fatalf("attached stream %d pid %d, want %d %d", p2.Stream(), p2.Pid(), p1.Stream(), p1.Pid())
	}
	tm2 := newTerm(p2)
	must(t, tm2.expectLine("first2")) // replayed from offset 0
	must(t, tm2.send("echo second$((2+1))\r"))
	must(t, tm2.expectLine("second3"))
	must(t, tm1.expectLine("second3"))

	must(t, p1.Detach(ctx))
	if err := tm1.ended(); !errors.Is(err, client.ErrDetached) {
		t.Fatalf("detached reader: %v", err)
	}
	must(t, tm2.send("exit 0\r"))
	if st, err := p2.Wait(ctx); err != nil || st.ExitCode() != 0 {
		t.Fatalf("wait: %v %v", st, err)
	}
	// A process stream is not a terminal.
	proc, err := c2.Exec(ctx, client.ExecOptions{Argv: []string{"true"}})
	must(t, err)
	if _, err := c1.AttachPTY(ctx, client.AttachOptions{Stream: proc.Stream()}); err == nil || !strings.Contains(err.Error(), "not a pty") {
		t.Fatalf("AttachPTY to a process: %v", err)
	}
}

// seqWriter checks that what it is given continues the output of
// `seq 1 N` on a terminal, and calls at once as the count passes each
// mark.
type seqWriter struct {
	want  []byte
	off   int
	marks []int
	at    func()
}

func (w *seqWriter) Write(b []byte) (int, error) {
	if w.off+len(b) > len(w.want) || !bytes.Equal(b, w.want[w.off:w.off+len(b)]) {
		return 0, fmt.Errorf("output at offset %d differs from seq's: %.40q", w.off, b)
	}
	w.off += len(b)
	for len(w.marks) > 0 && w.off >= w.marks[0] {
		w.marks = w.marks[1:]
		w.at()
	}
	return len(b), nil
}

// TestPTYReconnectMidOutput: the network drops three times while a
// terminal prints seq 1 200000; the reader sees every line exactly once.
func TestPTYReconnectMidOutput(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	proxy := newTCPProxy(t, a.http.Listener.Addr().String())
	var reconnects atomic.Int32
	c := dialURL(t, proxy.url(), client.Options{OnReconnect: func(uint64) { reconnects.Add(1) }})
	ctx := ctxLong(t)
	var want bytes.Buffer
	for i := 1; i <= 200000; i++ {
		fmt.Fprintf(&want, "%d\r\n", i)
	}
	p, err := c.PTY(ctx, client.PTYOptions{Argv: []string{"seq", "1", "200000"}})
	must(t, err)
	w := &seqWriter{want: want.Bytes(), marks: []int{100 << 10, 500 << 10, 1 << 20}, at: func() { proxy.cutAndWait(t, &reconnects) }}
	if _, err := io.Copy(w, p.Output()); err != nil {
		t.Fatal(err)
	}
	if w.off != want.Len() {
		t.Fatalf("got %d bytes, want %d", w.off, want.Len())
	}
	if st, err := p.Wait(ctx); err != nil || st.ExitCode() != 0 || len(p.Gaps()) != 0 {
		t.Fatalf("wait %v %v, gaps %v", st, err, p.Gaps())
	}
	if reconnects.Load() != 3 {
		t.Fatalf("%d reconnects, want 3", reconnects.Load())
	}
}

// TestPTYMany: fifty terminals on one client, each answers its own
// command.
func TestPTYMany(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{})
	ctx := ctxLong(t)
	const n = 50
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- func() error {
				p, err := c.PTY(ctx, client.PTYOptions{Argv: plainShell})
				if err != nil {
					return err
				}
				tm := newTerm(p)
				if err := tm.send(fmt.Sprintf("echo marker-$((%d+1000))\r", i)); err != nil {
					return err
				}
				if err := tm.expectLine(fmt.Sprintf("marker-%d", i+1000)); err != nil {
					return fmt.Errorf("terminal %d: %w", i, err)
				}
				if err := tm.send("exit\r"); err != nil {
					return err
				}
				st, err := p.Wait(ctx)
				if err == nil && st.ExitCode() != 0 {
					err = fmt.Errorf("terminal %d: %v", i, st)
				}
				return err
			}()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// TestPTYBadInput: each mistake gets the agent's error code, and the
// terminal (and client) keep working.
func TestPTYBadInput(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{})
	ctx := ctxLong(t)
	for _, tc := range []struct {
		name string
		o    client.PTYOptions
	}{
		{"70000 cols", client.PTYOptions{Cols: 70000}},
		{"negative rows", client.PTYOptions{Rows: -1}},
		{"unknown user", client.PTYOptions{User: "no-such-user-rayito"}},
		{"missing program", client.PTYOptions{Argv: []string{"/no/such/program"}}},
		{"missing cwd", client.PTYOptions{Cwd: "/no/such/dir"}},
	} {
		if _, err := c.PTY(ctx, tc.o); !client.HasCode(err, client.CodeBadRequest) {
			t.Errorf("%s: %v, want bad_request", tc.name, err)
		}
	}

	// A terminal in canonical mode takes keystrokes beyond a full line
	// buffer and discards them (Linux's n_tty), so a program that never
	// reads would still drain its input at the kernel's pace. In raw mode
	// the kernel stops taking input once its buffers are full.
	p, err := c.PTY(ctx, client.PTYOptions{Argv: []string{"sh", "-c", "stty raw -echo && echo ready && exec sleep 100"}})
	must(t, err)
	if err := readUntil(p.Output(), "ready\n"); err != nil { // raw: no CR
		t.Fatal(err)
	}
	// Output nobody reads would hold back the end beyond the window.
	go io.Copy(io.Discard, p.Output())
	for _, size := range [][2]int{{0, 0}, {70000, 24}, {80, 10001}} {
		if err := p.Resize(ctx, size[0], size[1]); !client.HasCode(err, client.CodeBadRequest) {
			t.Errorf("resize %dx%d: %v, want bad_request", size[0], size[1], err)
		}
	}
	must(t, p.Resize(ctx, 10000, 1))
	// sleep never reads: once 1 MiB of keystrokes waits in the agent, a
	// write waits for room (here until its context ends) instead of
	// failing, and the connection serves everything else meanwhile.
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	wctx, cancelWrite := context.WithTimeout(ctx, 2*time.Second)
	var werr error
	sent := 0
	for ; werr == nil && sent < 64<<20; sent += len(chunk) {
		_, werr = p.WriteContext(wctx, chunk)
	}
	cancelWrite()
	if !errors.Is(werr, context.DeadlineExceeded) || sent > 2<<20 {
		t.Fatalf("writing 64 MiB to a program that does not read: %v after %d bytes, want to wait for room after about 1 MiB", werr, sent)
	}
	if out, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"echo", "still served"}}); err != nil {
		t.Fatalf("the connection while a write waits: %v", err)
	} else if b, _ := io.ReadAll(out.Stdout()); string(b) != "still served\n" {
		t.Fatalf("the connection while a write waits: %q", b)
	}
	must(t, p.Signal(ctx, client.SIGKILL))
	st, err := p.Wait(ctx)
	if err != nil || st.Signal != client.SIGKILL || st.ExitCode() != 137 {
		t.Fatalf("wait: %v %v", st, err)
	}
	// After the end: input, resize and signals are conflicts.
	var e *client.Error
	if _, err := p.Write([]byte("x")); !errors.As(err, &e) || e.Code != client.CodeConflict {
		t.Errorf("input to an ended terminal: %v, want conflict", err)
	}
	if err := p.Resize(ctx, 80, 24); !client.HasCode(err, client.CodeConflict) {
		t.Errorf("resize of an ended terminal: %v, want conflict", err)
	}
	if err := p.Signal(ctx, client.SIGTERM); !client.HasCode(err, client.CodeConflict) {
		t.Errorf("signal to an ended terminal: %v, want conflict", err)
	}
	if _, err := c.AttachPTY(ctx, client.AttachOptions{Stream: 1 << 40}); !client.HasCode(err, client.CodeNotFound) {
		t.Errorf("attach to no stream: %v, want not_found", err)
	}
	// The client still works.
	p2, err := c.PTY(ctx, client.PTYOptions{Argv: []string{"sh", "-c", "exit 7"}, OnOutput: func([]byte) {}})
	must(t, err)
	if st, err := p2.Wait(ctx); err != nil || st.ExitCode() != 7 {
		t.Fatalf("a good terminal after the bad ones: %v %v", st, err)
	}
}
