package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// cellOK is the status of a cell that ran to its end (protocol section 5).
const cellOK = "ok"

// stopFile ends every producer: each checks for it between two items.
const stopFile = "/tmp/e2e-stop"

// tickerPy prints "NAME N PID" every INTERVAL seconds until STOP exists,
// then "done COUNT PID".
const tickerPy = `import os, sys, time
name, stop, every = sys.argv[1], sys.argv[2], float(sys.argv[3])
i = 0
while not os.path.exists(stop):
    print(f"{name} {i} {os.getpid()}", flush=True)
    i += 1
    time.sleep(every)
print(f"done {i} {os.getpid()}", flush=True)
`

// writerPy creates ROOT/d<i%3>/sub/f<i> every INTERVAL seconds until STOP
// exists, then prints "done COUNT PID". With KEEP > 0 it also removes the
// file it made KEEP files earlier, so the tree stays small however long
// it runs.
const writerPy = `import os, sys, time
root, stop, every, keep = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
f = lambda i: os.path.join(root, f"d{i % 3}", "sub", f"f{i}")
i = 0
while not os.path.exists(stop):
    open(f(i), "x").close()
    if keep > 0 and i >= keep:
        os.remove(f(i - keep))
    i += 1
    time.sleep(every)
print(f"done {i} {os.getpid()}", flush=True)
`

// cellPy is the slow cell: it prints a line every %g seconds until the
// stop file exists; the pid is the kernel's.
const cellPy = `import os, time
i = 0
while not os.path.exists('%s'):
    print(f"cell {i} {os.getpid()}", flush=True)
    i += 1
    time.sleep(%g)
print(f"done {i} {os.getpid()}", flush=True)
`

// pace is how fast the producers go and what the agent keeps of them.
type pace struct {
	tick, pty, write, cell float64 // seconds between two items
	// keepFiles: the watch's writer removes each file this many files
	// later (0: it keeps them all).
	keepFiles int
	// buffer is the retention of the command's and the terminal's output
	// in bytes (0: the agent's default).
	buffer int
	// image is the image to boot (nil: the one every test shares).
	image *tokenImage
}

// resumePace is the resume test's: a fast command, and no file removed.
var resumePace = pace{tick: 0.01, pty: 0.05, write: 0.05, cell: 0.1}

// every formats an interval for a producer's command line.
func every(seconds float64) string { return strconv.FormatFloat(seconds, 'g', -1, 64) }

// producer is one stream kept open across snapshots: what it received so
// far, and how to check its end.
type producer struct {
	name   string
	kind   client.Kind
	stream uint64
	pid    int // the producing process in the guest; 0 if none of its own
	seq    *sequence
	// finish waits until the stream ended after the stop file appeared
	// and reports anything wrong with how it ended.
	finish func(ctx context.Context) error
}

// readInto feeds r to seq until EOF; anything else is a problem (a gap
// means lost output).
func readInto(r io.Reader, seq *sequence, done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		seq.feed(string(buf[:n]))
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			seq.fail("read: %v", err)
			var gap *client.GapError
			if errors.As(err, &gap) {
				continue
			}
			return
		}
	}
}

// startTicker runs the ticker as a background command (exec).
func startTicker(ctx context.Context, c *client.Client, pc pace) (*producer, error) {
	p, err := c.Exec(ctx, client.ExecOptions{
		Argv:   []string{"python3", "-u", "-c", tickerPy, "tick", stopFile, every(pc.tick)},
		Tag:    "e2e-ticker",
		Buffer: pc.buffer,
	})
	if err != nil {
		return nil, fmt.Errorf("ticker: %w", err)
	}
	seq := newSequence("tick", p.Pid())
	read := make(chan struct{})
	go readInto(p.Stdout(), seq, read)
	var stderr strings.Builder
	errRead := make(chan struct{})
	go func() {
		defer close(errRead)
		_, _ = io.Copy(&stderr, p.Stderr())
	}()
	return &producer{name: "exec", kind: client.KindProcess, stream: p.Stream(), pid: p.Pid(), seq: seq,
		finish: func(ctx context.Context) error {
			st, err := p.Wait(ctx)
			<-read
			<-errRead
			if err == nil && (st.ExitCode() != 0 || stderr.Len() > 0) {
				err = fmt.Errorf("ticker ended %s: %s", st, stderr.String())
			}
			if gaps := p.Gaps(); len(gaps) > 0 {
				err = errors.Join(err, fmt.Errorf("ticker output had gaps %v", gaps))
			}
			return err
		}}, nil
}

// startPTYTicker runs the ticker in a terminal.
func startPTYTicker(ctx context.Context, c *client.Client, pc pace) (*producer, error) {
	p, err := c.PTY(ctx, client.PTYOptions{
		Argv: []string{"python3", "-u", "-c", tickerPy, "pty", stopFile, every(pc.pty)},
		Cols: 120, Rows: 40, Tag: "e2e-pty", Buffer: pc.buffer,
	})
	if err != nil {
		return nil, fmt.Errorf("pty: %w", err)
	}
	seq := newSequence("pty", p.Pid())
	read := make(chan struct{})
	go readInto(p.Output(), seq, read)
	return &producer{name: "pty", kind: client.KindPTY, stream: p.Stream(), pid: p.Pid(), seq: seq,
		finish: func(ctx context.Context) error {
			st, err := p.Wait(ctx)
			<-read
			if err == nil && st.ExitCode() != 0 {
				err = fmt.Errorf("pty program ended %s", st)
			}
			if gaps := p.Gaps(); len(gaps) > 0 {
				err = errors.Join(err, fmt.Errorf("terminal output had gaps %v", gaps))
			}
			return err
		}}, nil
}

// startWatch watches root recursively while a command creates files in
// its subdirectories; every file must be reported created exactly once,
// and the events' seqs must have no holes.
func startWatch(ctx context.Context, c *client.Client, g guest, root string, pc pace) (*producer, error) {
	if _, err := g.sh(ctx, `rm -rf "$1" && mkdir -p "$1/d0/sub" "$1/d1/sub" "$1/d2/sub"`, root); err != nil {
		return nil, err
	}
	w, err := c.Watch(ctx, root, true)
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	writer, err := c.Exec(ctx, client.ExecOptions{
		Argv: []string{"python3", "-u", "-c", writerPy, root, stopFile, every(pc.write), strconv.Itoa(pc.keepFiles)},
		Tag:  "e2e-writer",
	})
	if err != nil {
		return nil, fmt.Errorf("watch writer: %w", err)
	}
	// Files carry no pid: the writer's own exit checks it is the same one.
	seq := newSequence("watch", writer.Pid())
	events := make(chan struct{})
	var evErr error
	go func() {
		defer close(events)
		for {
			ev, err := w.Next(context.Background())
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				seq.fail("watch: %v", err)
				var gap *client.GapError
				if errors.As(err, &gap) {
					continue
				}
				evErr = err
				return
			}
			seq.seqEvent(ev.Seq)
			switch {
			case ev.Op == "overflow":
				seq.fail("overflow event %+v", ev)
			case ev.Op == "create" && !ev.Dir:
				n, err := strconv.Atoi(strings.TrimPrefix(path.Base(ev.Path), "f"))
				if err != nil || path.Dir(path.Dir(ev.Path)) != path.Join(root, "d"+strconv.Itoa(n%3)) {
					seq.fail("unexpected create %+v", ev)
					continue
				}
				seq.got(n, 0)
			}
		}
	}()
	var out []byte
	var outErr error
	outRead := make(chan struct{})
	go func() {
		defer close(outRead)
		out, outErr = io.ReadAll(writer.Stdout())
		_, _ = io.Copy(io.Discard, writer.Stderr())
	}()
	return &producer{name: "watch", kind: client.KindWatch, stream: w.Stream(), pid: writer.Pid(), seq: seq,
		finish: func(ctx context.Context) error {
			st, err := writer.Wait(ctx)
			<-outRead
			if err = errors.Join(err, outErr); err != nil {
				return fmt.Errorf("watch writer: %w", err)
			}
			var total, pid int
			if _, err := fmt.Sscanf(string(out), "done %d %d\n", &total, &pid); err != nil || st.ExitCode() != 0 || pid != writer.Pid() {
				return fmt.Errorf("watch writer ended %s with %q (pid %d)", st, out, writer.Pid())
			}
			seq.finish(total)
			if err := seq.waitComplete(ctx); err != nil {
				return err
			}
			cerr := w.Close(ctx)
			<-events
			if e := w.End(); cerr == nil && (e == nil || e.Reason != client.ReasonClosed) {
				cerr = fmt.Errorf("watch end %+v, want reason closed", e)
			}
			return errors.Join(cerr, evErr)
		}}, nil
}

// startCell runs the slow cell on kernel k.
func startCell(ctx context.Context, k *client.Kernel, kernelPid int, pc pace) (*producer, error) {
	seq := newSequence("cell", kernelPid)
	cell, err := k.Run(ctx, fmt.Sprintf(cellPy, stopFile, pc.cell), client.ExecuteOptions{OnStdout: seq.feed, OnStderr: func(s string) { seq.fail("stderr %q", s) }})
	if err != nil {
		return nil, fmt.Errorf("cell: %w", err)
	}
	type result struct {
		ex  *client.Execution
		err error
	}
	done := make(chan result, 1)
	go func() {
		ex, err := cell.Wait(context.Background())
		done <- result{ex, err}
	}()
	return &producer{name: "cell", kind: client.KindCell, stream: cell.Stream(), seq: seq,
		finish: func(ctx context.Context) error {
			var r result
			select {
			case r = <-done:
			case <-ctx.Done():
				return fmt.Errorf("cell did not end: %w", ctx.Err())
			}
			if r.err == nil && (r.ex.Status != cellOK || r.ex.Error != nil) {
				r.err = fmt.Errorf("cell ended %s: %+v", r.ex.Status, r.ex.Error)
			}
			if gaps := cell.Gaps(); len(gaps) > 0 {
				r.err = errors.Join(r.err, fmt.Errorf("cell events had gaps %v", gaps))
			}
			return r.err
		}}, nil
}

// echoPy writes back every line it reads, until a line that starts with
// "done": the lines a client types come back as output, so the sequence
// checks the input too (every line once, in order, none lost).
const echoPy = `import sys
for line in sys.stdin:
    sys.stdout.write(line)
    sys.stdout.flush()
    if line.startswith("done"):
        break
`

// readLine reads r a byte at a time (so nothing after it is taken) until
// a line that is want.
func readLine(r io.Reader, want string) error {
	var line []byte
	b := make([]byte, 1)
	for {
		if _, err := io.ReadFull(r, b); err != nil {
			return fmt.Errorf("waiting for %q (got %q): %w", want, line, err)
		}
		if b[0] != '\n' {
			line = append(line, b[0])
			continue
		}
		if string(line) == want {
			return nil
		}
		line = line[:0]
	}
}

// startInputEcho feeds the echo program lines "NAME N PID" from this side
// every `seconds`, through a command's stdin (pty false) or a terminal in
// raw mode (pty true), until finish; the echoed lines are the sequence.
// Input crosses every snapshot as the output does: the SDK numbers it and
// sends again from what the agent received.
func startInputEcho(ctx context.Context, c *client.Client, pc pace, pty bool) (*producer, error) {
	name, seconds := "stdin", pc.tick
	var w interface {
		WriteContext(context.Context, []byte) (int, error)
	}
	var out io.Reader
	var pid int
	var stream uint64
	var wait func(context.Context) (client.ExitStatus, error)
	var gaps func() []client.GapError
	var closeInput func(context.Context) error
	if pty {
		name, seconds = "typed", pc.pty
		p, err := c.PTY(ctx, client.PTYOptions{
			Argv: []string{"sh", "-c", `stty raw -echo && echo ready && exec python3 -u -c "$0"`, echoPy},
			Cols: 120, Rows: 40, Tag: "e2e-typed", Buffer: pc.buffer,
		})
		if err != nil {
			return nil, fmt.Errorf("typed: %w", err)
		}
		w, out, pid, stream, wait, gaps = p, p.Output(), p.Pid(), p.Stream(), p.Wait, p.Gaps
		closeInput = func(context.Context) error { return nil } // "done" ends it
		// Typed before stty, lines would be echoed by the terminal
		// itself, then again by the program.
		if err := readLine(out, "ready"); err != nil {
			return nil, fmt.Errorf("typed: %w", err)
		}
	} else {
		p, err := c.Exec(ctx, client.ExecOptions{
			Argv: []string{"python3", "-u", "-c", echoPy}, Stdin: true, Tag: "e2e-stdin", Buffer: pc.buffer,
		})
		if err != nil {
			return nil, fmt.Errorf("stdin: %w", err)
		}
		w, out, pid, stream, wait, gaps = p, p.Stdout(), p.Pid(), p.Stream(), p.Wait, p.Gaps
		closeInput = p.CloseStdin
	}
	seq := newSequence(name, pid)
	read := make(chan struct{})
	go readInto(out, seq, read)
	stop := make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		// Lines are written on their own schedule, snapshots or not: the
		// SDK keeps them while the connection is down.
		i := 0
		for {
			select {
			case <-stop:
				_, err := w.WriteContext(context.Background(), []byte(fmt.Sprintf("done %d %d\n", i, pid)))
				wrote <- err
				return
			case <-time.After(time.Duration(seconds * float64(time.Second))):
			}
			if _, err := w.WriteContext(context.Background(), []byte(fmt.Sprintf("%s %d %d\n", name, i, pid))); err != nil {
				wrote <- fmt.Errorf("writing line %d: %w", i, err)
				return
			}
			i++
		}
	}()
	var once sync.Once
	kind := client.KindProcess
	if pty {
		kind = client.KindPTY
	}
	return &producer{name: name, kind: kind, stream: stream, pid: pid, seq: seq,
		finish: func(ctx context.Context) error {
			once.Do(func() { close(stop) })
			var err error
			select {
			case err = <-wrote:
			case <-ctx.Done():
				return fmt.Errorf("%s: the writer did not end: %w", name, ctx.Err())
			}
			if err == nil {
				err = closeInput(ctx)
			}
			if err != nil {
				return err
			}
			st, err := wait(ctx)
			<-read
			if err == nil && st.ExitCode() != 0 {
				err = fmt.Errorf("%s echo ended %s", name, st)
			}
			if g := gaps(); len(g) > 0 {
				err = errors.Join(err, fmt.Errorf("%s output had gaps %v", name, g))
			}
			return err
		}}, nil
}
