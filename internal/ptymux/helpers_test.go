package ptymux_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/ptymux"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// waitLong bounds every wait for something that must happen; it is far
// above what a loaded 2-core machine needs.
const waitLong = 20 * time.Second

// One reaper per process: it is the only caller of wait4.
var (
	reaper   *proc.Reaper
	registry *stream.Registry
)

// TestMain shares one reaper and registry and fails the run if a PTY
// goroutine (run, pump, input copier) outlives the tests.
func TestMain(m *testing.M) {
	r, err := proc.NewReaper()
	if err != nil {
		fmt.Fprintln(os.Stderr, "reaper:", err)
		os.Exit(1)
	}
	reaper, registry = r, stream.NewRegistry(0)
	defaultChildSignals()
	code := m.Run()
	if code == 0 {
		if stacks := settlePTYGoroutines(); stacks != "" {
			fmt.Fprintf(os.Stderr, "goroutines left behind:\n%s\n", stacks)
			code = 1
		}
	}
	registry.Close()
	reaper.Close()
	os.Exit(code)
}

// defaultChildSignals makes SIGHUP and SIGINT reach the programs the tests
// start even when `go test` itself was started with them ignored (nohup, or
// `&` in a script): ignored signals stay ignored across exec, handled ones
// are reset, so catching them here keeps this process deaf to them while
// its children get the default action.
func defaultChildSignals() {
	sink := make(chan os.Signal, 1)
	for _, sig := range []os.Signal{syscall.SIGHUP, syscall.SIGINT} {
		if signal.Ignored(sig) {
			signal.Notify(sink, sig)
		}
	}
}

// settlePTYGoroutines waits for every goroutine owned by a PTY to end and
// returns the stacks of those that did not.
func settlePTYGoroutines() string {
	deadline := time.Now().Add(waitLong)
	for {
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var left []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "ptymux.(*PTY)") || strings.Contains(g, "stream.(*Input).run") {
				left = append(left, g)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return strings.Join(left, "\n\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func newManager(t testing.TB) *ptymux.Manager {
	level := zapcore.DebugLevel
	if _, bench := t.(*testing.B); bench {
		level = zapcore.InfoLevel // benchmarks print every log line
	}
	m := ptymux.NewManager(registry, reaper, nil, zaptest.NewLogger(t, zaptest.Level(level)))
	t.Cleanup(m.Close)
	return m
}

// shell is an interactive bash that reads no startup files and keeps no
// history, so its behaviour does not depend on the machine.
func shell() ptymux.Options {
	return ptymux.Options{
		Argv: []string{"bash", "--norc", "--noprofile"},
		Env:  map[string]string{"PS1": "$ ", "HISTFILE": ""},
	}
}

// term reads a PTY stream the way a client does: through an attachment,
// checking offsets, acknowledging what it consumed.
type term struct {
	t      testing.TB
	s      *stream.Stream
	p      *ptymux.PTY
	a      *stream.Attachment
	out    []byte
	cursor uint64
	mark   int // waitFor searches from here
	gaps   []stream.Item
	end    *stream.End
}

func start(t testing.TB, m *ptymux.Manager, o ptymux.Options) *term {
	t.Helper()
	s, err := m.Start(o)
	if err != nil {
		t.Fatalf("Start(%v): %v", o.Argv, err)
	}
	return attach(t, s, 0)
}

func attach(t testing.TB, s *stream.Stream, from uint64) *term {
	t.Helper()
	a, err := s.Attach(map[string]uint64{ptymux.Channel: from}, stream.DefaultWindow)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	p, ok := s.Control.(*ptymux.PTY)
	if !ok {
		t.Fatalf("Control is %T", s.Control)
	}
	return &term{t: t, s: s, p: p, a: a, cursor: from}
}

// read handles one item; false once the attachment has ended.
func (tm *term) read(ctx context.Context) (bool, error) {
	it, err := tm.a.Next(ctx, nil, 64<<10)
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	switch it.Kind {
	case stream.ItemData:
		if it.Offset != tm.cursor {
			tm.t.Fatalf("data at offset %d, expected %d", it.Offset, tm.cursor)
		}
		tm.out = append(tm.out, it.Data...)
		tm.cursor += uint64(len(it.Data))
		if err := tm.a.Ack(map[string]uint64{ptymux.Channel: tm.cursor}); err != nil {
			tm.t.Fatal(err)
		}
	case stream.ItemGap:
		// What is gone counts as consumed: the client moves on to To.
		tm.gaps = append(tm.gaps, it)
		tm.cursor = it.To
		if err := tm.a.Ack(map[string]uint64{ptymux.Channel: tm.cursor}); err != nil {
			tm.t.Fatal(err)
		}
	case stream.ItemEnd:
		tm.end = &it.End
		if c := it.Cursors[ptymux.Channel]; c != tm.cursor {
			tm.t.Fatalf("end cursor %d, read up to %d", c, tm.cursor)
		}
	}
	return tm.end == nil, nil
}

// waitFor reads until want appears after the previous match.
func (tm *term) waitFor(want string) {
	tm.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	for {
		if i := bytes.Index(tm.out[tm.mark:], []byte(want)); i >= 0 {
			tm.mark += i + len(want)
			return
		}
		more, err := tm.read(ctx)
		if err != nil || !more {
			tm.t.Fatalf("%q never came (err %v, end %+v); output:\n%q", want, err, tm.end, tail(tm.out))
		}
	}
}

// waitEnd reads everything up to the end and returns it.
func (tm *term) waitEnd() stream.End {
	tm.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	for tm.end == nil {
		if _, err := tm.read(ctx); err != nil {
			tm.t.Fatalf("no end: %v; output:\n%q", err, tail(tm.out))
		}
	}
	return *tm.end
}

func (tm *term) typ(s string) {
	tm.t.Helper()
	if err := tm.p.WriteInput([]byte(s)); err != nil {
		tm.t.Fatalf("WriteInput(%q): %v", s, err)
	}
}

func tail(b []byte) []byte {
	return b[max(0, len(b)-2000):]
}

// wantExit fails unless e is a normal exit with code.
func wantExit(t testing.TB, e stream.End, code int) {
	t.Helper()
	if e.Reason != stream.ReasonExit || e.ExitCode == nil || *e.ExitCode != code || e.Signal != "" {
		t.Fatalf("end %+v (code %v), want exit %d", e, e.ExitCode, code)
	}
}

// wantWireError fails unless err is a *wire.Error with code and a message
// containing msg.
func wantWireError(t testing.TB, err error, code wire.Code, msg string) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) {
		t.Fatalf("error %v (%T), want *wire.Error %s", err, err, code)
	}
	if we.Code != code || !strings.Contains(we.Message, msg) {
		t.Fatalf("error %q %q, want %s containing %q", we.Code, we.Message, code, msg)
	}
}

// waitChild waits for a process named comm in the session sid that is in
// the terminal's foreground (the shell may hand the terminal over to a job
// only after the job has started) and returns its pid.
func waitChild(t testing.TB, sid int, comm string) int {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for time.Now().Before(deadline) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if st, ok := procStat(pid); ok && st.comm == comm && st.sid == sid && st.pgrp == st.tpgid {
				return pid
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %s in the foreground of session %d", comm, sid)
	return 0
}

type stat struct {
	comm             string
	pgrp, sid, tpgid int
}

// procStat reads a process's /proc stat, false if it is gone or a zombie.
func procStat(pid int) (stat, bool) {
	var st stat
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, false
	}
	open, closing := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return st, false
	}
	f := strings.Fields(string(b[closing+1:])) // state ppid pgrp session tty_nr tpgid ...
	if len(f) < 6 || f[0] == "Z" {
		return st, false
	}
	st.comm = string(b[open+1 : closing])
	st.pgrp, _ = strconv.Atoi(f[2])
	st.sid, _ = strconv.Atoi(f[3])
	st.tpgid, _ = strconv.Atoi(f[5])
	return st, true
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	_, ok := procStat(pid)
	return ok
}
