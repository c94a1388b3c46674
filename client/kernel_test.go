package client_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// kernelWait bounds what involves starting a kernel: IPython takes
// seconds to import, and much longer when tests load both cores.
const kernelWait = 120 * time.Second

// answerWait bounds what a running kernel does at once (end a cell it
// was interrupted in, abort one that timed out after its 5 s fallback),
// so a missing answer fails the test instead of hanging it for minutes.
const answerWait = 30 * time.Second

// stopCell interrupts a cell that is still running, then restarts the
// kernel if that did not end it, so later cells are not stuck behind it.
func stopCell(k *client.Kernel, cell *client.Cell) {
	select {
	case <-cell.Done():
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), answerWait)
	defer cancel()
	k.Interrupt(ctx)
	select {
	case <-cell.Done():
	case <-time.After(answerWait / 2):
		k.Restart(ctx)
	}
}

func ctxKernel(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), kernelWait)
	t.Cleanup(cancel)
	return ctx
}

// execute runs a cell and fails the test unless it ran to its end.
func execute(t testing.TB, k *client.Kernel, code string, o client.ExecuteOptions) *client.Execution {
	t.Helper()
	ex, err := k.Execute(ctxKernel(t), code, o)
	if err != nil {
		t.Fatalf("execute %q: %v", code, err)
	}
	return ex
}

// pngCell displays a 1x1 PNG it builds itself (no imaging library) and
// prints its size.
const pngCell = `
import struct, zlib
from IPython.display import display, Image
def chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data) & 0xffffffff)
png = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(b'\x00\xff\x00\x00')) + chunk(b'IEND', b'')
display(Image(data=png, format='png'))
print(len(png))
`

// TestKernelCells runs cells on the default kernel through the SDK: state
// between cells, stream order, exceptions, images, input and interrupts.
func TestKernelCells(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{})
	k := c.DefaultKernel()
	if err := k.Interrupt(ctxLong(t)); !errors.Is(err, client.ErrNoDefaultKernel) {
		t.Fatalf("interrupt before any cell: %v", err)
	}

	t.Run("state", func(t *testing.T) {
		ex := execute(t, k, "x = 42", client.ExecuteOptions{})
		if ex.Status != client.StatusOK || ex.Text() != "" || ex.Kernel == "" {
			t.Fatalf("x = 42: %+v", ex)
		}
		ex = execute(t, k, "x", client.ExecuteOptions{})
		if ex.Text() != "42" || ex.Status != client.StatusOK || len(ex.Results) != 1 || !ex.Results[0].Main || ex.ExecutionCount < 2 {
			t.Fatalf("x: %+v", ex)
		}
	})

	t.Run("stream order", func(t *testing.T) {
		var order []string
		ex := execute(t, k, "import sys\nprint('a', flush=True)\nprint('b', file=sys.stderr, flush=True)\nprint('c', flush=True)\n'done'", client.ExecuteOptions{
			OnStdout: func(s string) { order = append(order, "out:"+s) },
			OnStderr: func(s string) { order = append(order, "err:"+s) },
			OnResult: func(o client.Output) { order = append(order, "result:"+o.Text()) },
		})
		if got := strings.Join(order, " "); got != "out:a\n err:b\n out:c\n result:'done'" {
			t.Fatalf("callbacks in order %q", got)
		}
		if ex.Stdout != "a\nc\n" || ex.Stderr != "b\n" || ex.Text() != "'done'" {
			t.Fatalf("%+v", ex)
		}
	})

	t.Run("exception", func(t *testing.T) {
		var seen []client.ExecError
		ex := execute(t, k, "print('before')\n1/0", client.ExecuteOptions{OnError: func(e client.ExecError) { seen = append(seen, e) }})
		if ex.Status != client.StatusError || ex.Error == nil || ex.Error.Name != "ZeroDivisionError" || ex.Error.Value != "division by zero" {
			t.Fatalf("1/0: %+v", ex)
		}
		tb := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(strings.Join(ex.Error.Traceback, "\n"), "") // colours
		if !strings.Contains(tb, "ZeroDivisionError") || !strings.Contains(tb, "----> 2 1/0") {
			t.Fatalf("traceback %q", tb)
		}
		if len(seen) != 1 || ex.Stdout != "before\n" {
			t.Fatalf("OnError calls %v, stdout %q", seen, ex.Stdout)
		}
		// An error never aborts the next cell.
		if ex := execute(t, k, "x + 1", client.ExecuteOptions{}); ex.Text() != "43" {
			t.Fatalf("after an exception: %+v", ex)
		}
	})

	t.Run("png", func(t *testing.T) {
		ex := execute(t, k, pngCell, client.ExecuteOptions{})
		if len(ex.Displays) != 1 {
			t.Fatalf("displays %+v", ex.Displays)
		}
		b64, _ := ex.Displays[0].Data["image/png"].(string)
		png, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
		if err != nil || !strings.HasPrefix(string(png), "\x89PNG\r\n\x1a\n") || strconv.Itoa(len(png))+"\n" != ex.Stdout {
			t.Fatalf("image/png %q (%v), kernel says %q bytes", b64, err, ex.Stdout)
		}
	})

	t.Run("input", func(t *testing.T) {
		var prompts []string
		ex := execute(t, k, "name = input('name? ')\nprint('hello ' + name)", client.ExecuteOptions{
			OnInput: func(prompt string, password bool) (string, error) {
				prompts = append(prompts, fmt.Sprintf("%s%v", prompt, password))
				return "bob", nil
			},
		})
		if ex.Stdout != "hello bob\n" || strings.Join(prompts, ",") != "name? false" {
			t.Fatalf("stdout %q, prompts %q", ex.Stdout, prompts)
		}
		// A failing answer interrupts the kernel and is reported.
		boom := errors.New("no answer")
		ex, err := k.Execute(ctxKernel(t), "input('again? ')", client.ExecuteOptions{OnInput: func(string, bool) (string, error) { return "", boom }})
		if !errors.Is(err, boom) || ex == nil || ex.Error == nil || ex.Error.Name != "KeyboardInterrupt" {
			t.Fatalf("failing OnInput: %+v %v", ex, err)
		}
		// Without stdin, input() raises.
		ex = execute(t, k, "input()", client.ExecuteOptions{})
		if ex.Error == nil || ex.Error.Name != "StdinNotImplementedError" {
			t.Fatalf("input without stdin: %+v", ex.Error)
		}
	})

	t.Run("interrupt", func(t *testing.T) {
		ctx := ctxKernel(t)
		cell, err := k.Run(ctx, "print('spinning', flush=True)\nwhile True: pass", client.ExecuteOptions{})
		must(t, err)
		// Whatever fails below, the loop must not hold the kernel: the
		// next subtests' cells would wait behind it.
		t.Cleanup(func() { stopCell(k, cell) })
		if cell.Kernel() == "" || cell.Stream() == 0 {
			t.Fatalf("kernel %q, stream %d", cell.Kernel(), cell.Stream())
		}
		// One print may come as several stream messages.
		var out string
		for want := uint64(1); out != "spinning\n"; want++ {
			ev, err := cell.Next(ctx)
			if err != nil || ev.Type != client.CellStdout || ev.Seq != want || !strings.HasPrefix("spinning\n", out+ev.Text) {
				t.Fatalf("event %d: %+v %v (stdout so far %q)", want, ev, err, out)
			}
			out += ev.Text
		}
		must(t, k.Interrupt(ctx))
		actx, cancel := context.WithTimeout(ctx, answerWait) // a lost interrupt fails here
		defer cancel()
		ex, err := cell.Wait(actx)
		if err != nil || ex.Status != client.StatusError || ex.Error == nil || ex.Error.Name != "KeyboardInterrupt" || ex.Stdout != "spinning\n" {
			t.Fatalf("interrupted cell: %+v %v", ex, err)
		}
		if ex := execute(t, k, "x", client.ExecuteOptions{}); ex.Text() != "42" {
			t.Fatalf("state after the interrupt: %+v", ex)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctxKernel(t), answerWait)
		defer cancel()
		ex, err := k.Execute(ctx, "import time\ntime.sleep(60)", client.ExecuteOptions{Timeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatalf("timed out cell: %v", err)
		}
		if ex.Status != client.StatusAborted || !strings.Contains(ex.Message, "timed out") {
			t.Fatalf("timed out cell: %+v", ex)
		}
	})

	t.Run("errors", func(t *testing.T) {
		ctx := ctxKernel(t)
		if _, err := c.Kernel("k999").Execute(ctx, "1", client.ExecuteOptions{}); !client.HasCode(err, client.CodeNotFound) {
			t.Errorf("unknown kernel: %v", err)
		}
		if _, err := k.Execute(ctx, "  \n", client.ExecuteOptions{}); !client.HasCode(err, client.CodeBadRequest) {
			t.Errorf("empty code: %v", err)
		}
		if _, err := c.StartKernel(ctx, client.KernelOptions{Name: "no-such-spec"}); !client.HasCode(err, client.CodeNotFound) {
			t.Errorf("unknown kernelspec: %v", err)
		}
		if _, err := c.StartKernel(ctx, client.KernelOptions{Name: "../python3"}); !client.HasCode(err, client.CodeBadRequest) {
			t.Errorf("malformed kernelspec name: %v", err)
		}
		if err := c.Kernel("k999").Interrupt(ctx); !client.HasCode(err, client.CodeNotFound) {
			t.Errorf("interrupt of an unknown kernel: %v", err)
		}
	})
}

// TestTwoKernels: two kernels keep separate state; shutting one down
// leaves the other.
func TestTwoKernels(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{})
	ctx := ctxKernel(t)
	k1, err := c.StartKernel(ctx, client.KernelOptions{})
	must(t, err)
	k2, err := c.StartKernel(ctx, client.KernelOptions{Env: map[string]string{"WHICH": "two"}, Cwd: "/tmp"})
	must(t, err)
	if k1.ID() == k2.ID() || k1.ID() == "" {
		t.Fatalf("ids %q %q", k1.ID(), k2.ID())
	}
	execute(t, k1, "x = 1", client.ExecuteOptions{})
	execute(t, k2, "x = 2", client.ExecuteOptions{})
	if a, b := execute(t, k1, "x", client.ExecuteOptions{}).Text(), execute(t, k2, "x", client.ExecuteOptions{}).Text(); a != "1" || b != "2" {
		t.Fatalf("x is %q on %s and %q on %s", a, k1.ID(), b, k2.ID())
	}
	if s := execute(t, k2, "import os\nos.environ['WHICH'] + ' ' + os.getcwd()", client.ExecuteOptions{}).Text(); s != "'two /tmp'" {
		t.Fatalf("env and cwd of k2: %s", s)
	}
	ks, err := c.Kernels(ctx)
	if err != nil || len(ks) != 2 || ks[0].Pid == 0 || ks[0].Name != "python3" || len(ks[1].UUID) != 36 || ks[0].UUID == ks[1].UUID {
		t.Fatalf("kernels %+v %v", ks, err)
	}
	// A kernel's UUID (the id Jupyter's surface shows) names it too.
	if s := execute(t, c.Kernel(ks[1].UUID), "x", client.ExecuteOptions{}).Text(); s != "2" {
		t.Fatalf("x on %s (k2's UUID): %s", ks[1].UUID, s)
	}
	must(t, k2.Restart(ctx))
	if ex := execute(t, k2, "x", client.ExecuteOptions{}); ex.Error == nil || ex.Error.Name != "NameError" {
		t.Fatalf("x after a restart: %+v", ex)
	}
	must(t, k1.Shutdown(ctx))
	if _, err := k1.Execute(ctx, "x", client.ExecuteOptions{}); !client.HasCode(err, client.CodeNotFound) {
		t.Fatalf("execute on a shut down kernel: %v", err)
	}
	ks, err = c.Kernels(ctx)
	if err != nil || len(ks) != 1 || ks[0].Kernel != k2.ID() {
		t.Fatalf("kernels after shutdown %+v %v", ks, err)
	}
}

// TestCellSurvivesCuts: the network drops twice while a cell prints
// 10,000 lines; the client reconnects and has every line once.
func TestCellSurvivesCuts(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	proxy := newTCPProxy(t, a.http.Listener.Addr().String())
	var reconnects atomic.Int32
	c := dialURL(t, proxy.url(), client.Options{OnReconnect: func(uint64) { reconnects.Add(1) }})
	var want strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&want, "%d\n", i)
	}
	lines, cuts := 0, []int{2000, 6000}
	code := "import time\nfor i in range(10000):\n    print(i, flush=i % 50 == 0)\n    if i % 50 == 0: time.sleep(0.005)"
	ex := execute(t, c.DefaultKernel(), code, client.ExecuteOptions{OnStdout: func(s string) {
		lines += strings.Count(s, "\n")
		if len(cuts) > 0 && lines >= cuts[0] {
			cuts = cuts[1:]
			proxy.cutAndWait(t, &reconnects)
		}
	}})
	if ex.Stdout != want.String() || ex.Status != client.StatusOK {
		t.Fatalf("status %s, %d bytes of stdout, want %d; starts %.50q", ex.Status, len(ex.Stdout), want.Len(), ex.Stdout)
	}
	if len(cuts) != 0 {
		t.Fatalf("the cell ended before the cuts at %v lines", cuts)
	}
	if reconnects.Load() != 2 {
		t.Fatalf("%d reconnects, want 2", reconnects.Load())
	}
}

// TestAttachCell: another client attaches to a running cell from a seq
// and streams the rest with Events.
func TestAttachCell(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	c1, c2 := a.dial(t, client.Options{}), a.dial(t, client.Options{})
	ctx := ctxKernel(t)
	cell, err := c1.DefaultKernel().Run(ctx, "import time\nfor i in range(5):\n    print(i, flush=True)\n    time.sleep(0.05)\ni", client.ExecuteOptions{})
	must(t, err)
	// The first print, in one message or several.
	var seen uint64
	for out := ""; out != "0\n"; {
		ev, err := cell.Next(ctx)
		if err != nil || ev.Type != client.CellStdout || !strings.HasPrefix("0\n", out+ev.Text) {
			t.Fatalf("event %+v %v after stdout %q, want \"0\\n\"", ev, err, out)
		}
		out, seen = out+ev.Text, ev.Seq
	}
	other, err := c2.AttachCell(ctx, client.AttachOptions{Stream: cell.Stream(), From: map[string]uint64{"events": seen}})
	must(t, err)
	var got []string
	for ev := range other.Events() {
		got = append(got, ev.Type)
	}
	ex, err := other.Wait(ctx)
	if err != nil || ex.Status != client.StatusOK || ex.Text() != "4" || ex.Stdout != "1\n2\n3\n4\n" {
		t.Fatalf("attached cell: %+v %v (events %q)", ex, err, got)
	}
	if all, err := cell.Wait(ctx); err != nil || all.Stdout != "0\n1\n2\n3\n4\n" {
		t.Fatalf("first client: %+v %v", all, err)
	}
	if _, err := c2.AttachCell(ctx, client.AttachOptions{Stream: 1 << 40}); !client.HasCode(err, client.CodeNotFound) {
		t.Fatalf("attach to no cell: %v", err)
	}
}
