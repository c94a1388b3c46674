package jupyter

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

func TestExecuteKeepsState(t *testing.T) {
	t.Parallel()
	k := sharedKernel(t)
	evs, end := run(t, k.ID(), "x = 42")
	wantStatus(t, end, StatusOK)
	if len(evs) != 0 {
		t.Fatalf("assignment produced events: %+v", evs)
	}
	first := *end.ExecutionCount

	evs, end = run(t, k.ID(), "x")
	wantStatus(t, end, StatusOK)
	res, ok := find(evs, "result")
	if !ok || res.text("text/plain") != "42" || res.Main == nil || !*res.Main {
		t.Fatalf("want a main result 42, got %+v", evs)
	}
	if res.ExecutionCount == nil || *res.ExecutionCount != *end.ExecutionCount || *end.ExecutionCount <= first {
		t.Fatalf("execution counts: first %d, result %v, end %v", first, res.ExecutionCount, *end.ExecutionCount)
	}
}

func TestStdoutAndStderrInOrder(t *testing.T) {
	t.Parallel()
	k := sharedKernel(t)
	code := "import sys\n" +
		"print('one'); sys.stdout.flush()\n" +
		"print('two', file=sys.stderr); sys.stderr.flush()\n" +
		"print('three'); sys.stdout.flush()\n"
	evs, end := run(t, k.ID(), code)
	wantStatus(t, end, StatusOK)
	// ipykernel may publish one print as two stream messages ("one", then
	// "\n") when its flush timer fires in between, on a loaded machine:
	// what must hold is the text of each run of one stream, in order.
	var got []string
	for i, e := range evs {
		if i > 0 && evs[i-1].Type == e.Type {
			got[len(got)-1] += e.Text
			continue
		}
		got = append(got, e.Type+":"+e.Text)
	}
	want := []string{"stdout:one\n", "stderr:two\n", "stdout:three\n"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestErrorHasTraceback(t *testing.T) {
	t.Parallel()
	k := sharedKernel(t)
	evs, end := run(t, k.ID(), "def divide():\n    return 1/0\ndivide()")
	wantStatus(t, end, StatusError)
	e, ok := find(evs, "error")
	if !ok || e.Name != "ZeroDivisionError" || e.Value != "division by zero" {
		t.Fatalf("want ZeroDivisionError, got %+v", evs)
	}
	if !strings.Contains(strings.Join(e.Traceback, "\n"), "divide") {
		t.Fatalf("traceback does not name the function: %q", e.Traceback)
	}
	// An error does not abort the cells after it.
	evs, end = run(t, k.ID(), "6 * 7")
	wantStatus(t, end, StatusOK)
	if res, _ := find(evs, "result"); res.text("text/plain") != "42" {
		t.Fatalf("cell after an error: %+v", evs)
	}
}

func TestDisplayPNG(t *testing.T) {
	t.Parallel()
	k := sharedKernel(t)
	code := `import struct, zlib
from IPython.display import Image, display
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
w, h = 3, 2
rows = b"".join(b"\x00" + b"\xff\x00\x00" * w for _ in range(h))
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
display(Image(data=png))
`
	evs, end := run(t, k.ID(), code)
	wantStatus(t, end, StatusOK)
	d, ok := find(evs, "display")
	if !ok {
		t.Fatalf("no display event: %+v", evs)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(d.text("image/png")))
	if err != nil {
		t.Fatalf("image/png is not base64: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("image/png is not a PNG: %v", err)
	}
	r, g, b, _ := img.At(2, 1).RGBA()
	if img.Bounds().Dx() != 3 || img.Bounds().Dy() != 2 || r != 0xffff || g != 0 || b != 0 {
		t.Fatalf("image is %v with pixel (%d,%d,%d)", img.Bounds(), r, g, b)
	}
}

func TestInputReply(t *testing.T) {
	t.Parallel()
	k := sharedKernel(t)
	s, _ := execute(t, k.ID(), "name = input('name? ')\nprint('hello ' + name)", 0, true)
	r := attach(t, s, 0)
	ev, end := r.next()
	if end != nil || ev.Type != "input_request" || ev.Prompt != "name? " || ev.Password == nil || *ev.Password {
		t.Fatalf("want an input_request, got %+v %+v", ev, end)
	}
	if err := env.mgr.InputReply(s.ID, "ada"); err != nil {
		t.Fatal(err)
	}
	evs, e := r.all()
	wantStatus(t, e, StatusOK)
	if stdout(evs) != "hello ada\n" {
		t.Fatalf("stdout %q", stdout(evs))
	}
	wantCode(t, env.mgr.InputReply(s.ID, "again"), "conflict")

	// Without allow_stdin the kernel refuses to read.
	evs, e = run(t, k.ID(), "input('x? ')")
	wantStatus(t, e, StatusError)
	if ev, ok := find(evs, "error"); !ok || ev.Name != "StdinNotImplementedError" {
		t.Fatalf("want StdinNotImplementedError, got %+v", evs)
	}
}

func TestQueuedCellsRunInOrder(t *testing.T) {
	t.Parallel()
	k := sharedKernel(t)
	const n = 100
	readers := make([]*reader, n)
	for i := range n {
		s, _ := execute(t, k.ID(), fmt.Sprintf("print(%d)", i), 0, false)
		readers[i] = attach(t, s, 0)
	}
	last := 0
	for i, r := range readers {
		evs, end := r.all()
		wantStatus(t, end, StatusOK)
		if stdout(evs) != fmt.Sprintf("%d\n", i) {
			t.Fatalf("cell %d printed %q", i, stdout(evs))
		}
		if *end.ExecutionCount <= last {
			t.Fatalf("cell %d ran as execution %d, after %d", i, *end.ExecutionCount, last)
		}
		last = *end.ExecutionCount
	}
}

func TestReattachGetsEveryLineOnce(t *testing.T) {
	t.Parallel()
	k := sharedKernel(t)
	const lines = 10000
	code := fmt.Sprintf("import sys, time\nfor i in range(%d):\n    print('line', i)\n    if i %% 1000 == 999:\n        sys.stdout.flush(); time.sleep(0.05)\n", lines)
	s, _ := execute(t, k.ID(), code, 0, false)

	r := attach(t, s, 0)
	var out strings.Builder
	for out.Len() == 0 || r.last < 3 {
		ev, end := r.next()
		if end != nil {
			t.Fatalf("cell ended before the reader detached: %+v", end)
		}
		out.WriteString(ev.Text)
	}
	r.a.Close()
	// The cell keeps printing while nobody is attached.
	time.Sleep(200 * time.Millisecond)

	evs, end := attach(t, s, r.last).all()
	wantStatus(t, end, StatusOK)
	out.WriteString(stdout(evs))
	var want strings.Builder
	for i := range lines {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if out.String() != want.String() {
		t.Fatalf("got %d bytes of output, want %d; every line exactly once", out.Len(), want.Len())
	}
}

func TestTwoKernelsKeepSeparateState(t *testing.T) {
	t.Parallel()
	a, b := sharedKernel(t), startKernel(t)
	// Both cells are queued before either is read, so both kernels work
	// at the same time.
	var readers []*reader
	for _, k := range []*Kernel{a, b} {
		s, _ := execute(t, k.ID(), fmt.Sprintf("import time; time.sleep(0.2); who = %q", k.ID()), 0, false)
		readers = append(readers, attach(t, s, 0))
	}
	for _, r := range readers {
		_, end := r.all()
		wantStatus(t, end, StatusOK)
	}
	for _, k := range []*Kernel{a, b} {
		evs, _ := run(t, k.ID(), "who")
		if res, _ := find(evs, "result"); res.text("text/plain") != fmt.Sprintf("'%s'", k.ID()) {
			t.Fatalf("kernel %s has who = %+v", k.ID(), evs)
		}
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	k := sharedKernel(t)
	ctx := t.Context()
	_, _, err := env.mgr.Execute(ctx, k.ID(), "  \n", 0, false)
	wantCode(t, err, "bad_request")
	_, _, err = env.mgr.Execute(ctx, "k999", "1", 0, false)
	wantCode(t, err, "not_found")
	_, _, err = env.mgr.Execute(ctx, k.ID(), "1", -time.Second, false)
	wantCode(t, err, "bad_request")
	_, err = env.mgr.Start(ctx, StartOptions{Name: "no-such-kernel"})
	wantCode(t, err, "not_found")
	_, err = env.mgr.Start(ctx, StartOptions{Name: "../python3"})
	wantCode(t, err, "bad_request")
	_, err = env.mgr.Start(ctx, StartOptions{Cwd: "/no/such/dir"})
	wantCode(t, err, "bad_request")
	_, err = env.mgr.Get("k999")
	wantCode(t, err, "not_found")
	wantCode(t, env.mgr.Interrupt("k999"), "not_found")
	wantCode(t, env.mgr.Restart(ctx, "k999"), "not_found")
	wantCode(t, env.mgr.Shutdown(ctx, "k999"), "not_found")
	_, err = env.mgr.Channels("k999")
	wantCode(t, err, "not_found")
	wantCode(t, env.mgr.InputReply(1<<40, "x"), "not_found")
	rs, err := env.mgr.Channels(k.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Control.(*Relay).Close()
	wantCode(t, env.mgr.InputReply(rs.ID, "x"), "bad_request")

	// No python3 kernelspec where the manager looks: say what to install.
	empty := NewManager(Options{Registry: env.reg, Reaper: env.mgr.reaper, DataDirs: []string{t.TempDir()}})
	defer empty.Close()
	_, err = empty.Start(ctx, StartOptions{})
	wantCode(t, err, "unavailable")
	if !strings.Contains(err.Error(), "python3-ipykernel") {
		t.Fatalf("error does not say what to install: %v", err)
	}
	_, _, err = empty.Execute(ctx, "", "1", 0, false)
	wantCode(t, err, "unavailable")
}

// TestCancelCell: a cancelled cell that runs has its kernel interrupted
// and ends; a cancelled cell still queued never runs; the cell after
// them runs at once, on a kernel that kept its state.
func TestCancelCell(t *testing.T) {
	t.Parallel()
	k := startKernel(t)
	run(t, k.ID(), "kept = 'state'")
	slow, _ := execute(t, k.ID(), "import time\nprint('sleeping', flush=True)\ntime.sleep(300)\nafter_sleep = 1", 0, false)
	queued, _ := execute(t, k.ID(), "queued_ran = 1", 0, false)
	r := attach(t, slow, 0)
	r.untilStdout("sleeping\n")
	if err := env.mgr.CancelCell(queued.ID, "its client went away"); err != nil {
		t.Fatal(err)
	}
	evs, end := attach(t, queued, 0).all()
	wantStatus(t, end, StatusAborted)
	if !strings.Contains(end.Message, "cancelled before it ran: its client went away") || len(evs) != 0 {
		t.Fatalf("the queued cell: %+v, %+v", evs, end)
	}
	if err := env.mgr.CancelCell(slow.ID, "its client went away"); err != nil {
		t.Fatal(err)
	}
	evs, end = r.all()
	if end.Reason != stream.ReasonDone || end.Status == StatusOK {
		t.Fatalf("the running cell after its cancel: %+v", end)
	}
	var text strings.Builder
	for _, e := range evs {
		text.WriteString(e.Text)
	}
	if !strings.Contains(text.String(), "cancelled: its client went away; interrupting the kernel") {
		t.Fatalf("no note of the cancel: %+v", evs)
	}
	evs, end = run(t, k.ID(), "(kept, 'after_sleep' in globals(), 'queued_ran' in globals())")
	wantStatus(t, end, StatusOK)
	if res, _ := find(evs, "result"); res.text("text/plain") != "('state', False, False)" {
		t.Fatalf("after the cancels: %+v", evs)
	}
	// A cell that ended is left as it is; a stream that is no cell is refused.
	if err := env.mgr.CancelCell(slow.ID, "again"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, env.mgr.CancelCell(1<<60, "x"), wire.CodeNotFound)
}
