package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/rayito/rayito-agent/internal/wire"
)

// PTYOptions describe a program to run in a terminal. The zero value runs
// the user's login shell in an 80x24 terminal.
type PTYOptions struct {
	// Argv is the program; nil runs the user's login shell.
	Argv []string
	// Cols and Rows are the terminal's size; 0 picks the default (80x24).
	// Each must be 1 to 10000.
	Cols, Rows int
	Env        map[string]string
	Cwd        string
	User       string
	Tag        string
	// Buffer is the agent's retention in bytes; 0: 4 MiB. Output older
	// than that is dropped (a terminal never blocks its program), which a
	// reader that fell behind sees as a *GapError.
	Buffer int
	// KeepAwake holds the sandbox's idle clock while the program runs (see
	// ExecOptions.KeepAwake).
	KeepAwake bool
	// OnOutput, if set, receives the terminal's output in order on a
	// goroutine of its own; the slice is valid during the call.
	OnOutput func([]byte)
}

type ptyParams struct {
	Argv   []string          `json:"argv,omitempty"`
	Cols   *int              `json:"cols,omitempty"`
	Rows   *int              `json:"rows,omitempty"`
	Env    map[string]string `json:"env,omitempty"`
	Cwd    string            `json:"cwd,omitempty"`
	User   string            `json:"user,omitempty"`
	Tag    string            `json:"tag,omitempty"`
	Buffer int               `json:"buffer,omitempty"`
	Keep   bool              `json:"keep_awake,omitempty"`
}

// nonZero turns the zero value into "absent", so the agent applies its
// default and checks every other value itself.
func nonZero(v int) *int {
	if v == 0 {
		return nil
	}
	return &v
}

// PTY is a program running in a terminal on the agent: its output (the
// raw terminal byte stream), keystrokes, size, signals and exit.
//
// Concurrency: read Output from one goroutine at a time; Write from one
// goroutine at a time; everything else from anywhere.
type PTY struct {
	h    *handle
	pid  int
	hold string

	wmu   sync.Mutex
	frame []byte // IN frame being written
}

// PTY starts a program in a terminal and attaches to it. Like Exec, the
// request is never re-sent: if the connection drops before the answer it
// fails with ErrConnectionLost (find the terminal with List, by Tag).
func (c *Client) PTY(ctx context.Context, o PTYOptions) (*PTY, error) {
	p := ptyParams{Argv: o.Argv, Cols: nonZero(o.Cols), Rows: nonZero(o.Rows), Env: o.Env, Cwd: o.Cwd, User: o.User, Tag: o.Tag, Buffer: o.Buffer, Keep: o.KeepAwake}
	h, r, err := c.create(ctx, "pty", p, KindPTY, outputs{wire.ChanPTY: o.OnOutput})
	if err != nil {
		return nil, err
	}
	return &PTY{h: h, pid: r.Pid, hold: r.Hold}, nil
}

// AttachPTY attaches to a running or recently ended terminal and replays
// its output from the From cursor ("pty"), then follows it live.
func (c *Client) AttachPTY(ctx context.Context, o AttachOptions) (*PTY, error) {
	h, r, err := c.attach(ctx, o, KindPTY, outputs{wire.ChanPTY: o.OnOutput})
	if err != nil {
		return nil, err
	}
	pid := r.Pid
	if pid == 0 {
		pid = o.Pid
	}
	if pid == 0 {
		pid = c.lookupPid(ctx, h.id)
	}
	return &PTY{h: h, pid: pid}, nil
}

// Stream is the agent's id of the terminal's stream.
func (p *PTY) Stream() uint64 { return p.h.id }

// Pid is the program's process id inside the sandbox (0 if unknown).
func (p *PTY) Pid() int { return p.pid }

// Hold is the id of the hold that PTYOptions.KeepAwake made ("" if none).
func (p *PTY) Hold() string { return p.hold }

// Output returns the terminal's output, in order, from this handle's
// start cursor: io.EOF after the program ended and everything was read, a
// *GapError once where the agent dropped output nobody had read (read on
// after it), ErrCallbackOwnsOutput if OnOutput was set.
func (p *PTY) Output() io.Reader { return p.h.bytes[wire.ChanPTY] }

// Write sends keystrokes: Enter is "\r", Ctrl-C 0x03, Ctrl-D 0x04. It
// waits while 1 MiB the program has not read is queued, and every
// keystroke reaches the terminal once and in order across reconnects and
// resumes, as Process.Write's input does. Writing to a terminal whose
// program has ended fails with a `conflict` *Error, as the agent answers
// such input.
func (p *PTY) Write(b []byte) (int, error) { return p.WriteContext(context.Background(), b) }

// WriteContext is Write that stops waiting for room when ctx ends.
func (p *PTY) WriteContext(ctx context.Context, b []byte) (int, error) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := p.endedError(); err != nil {
		return 0, err
	}
	n, numbered, err := p.h.input.write(ctx, b)
	if !numbered && err == nil {
		var m int
		m, err = p.h.writeInput(&p.frame, b[n:])
		n += m
	}
	if errors.Is(err, io.ErrClosedPipe) {
		if e := p.endedError(); e != nil {
			err = e
		}
	}
	return n, err
}

// endedError is the agent's answer to input for an ended terminal, once
// this handle saw the end.
func (p *PTY) endedError() error {
	select {
	case <-p.h.done:
	default:
		return nil
	}
	p.h.mu.Lock()
	defer p.h.mu.Unlock()
	if p.h.end == nil || p.h.end.Reason != ReasonExit && p.h.end.Reason != ReasonOOMKilled {
		return nil
	}
	return &Error{Code: CodeConflict, Message: fmt.Sprintf("pty %d has ended", p.h.id), Stream: p.h.id}
}

// Resize sets the terminal's size (each 1 to 10000); the program in the
// foreground gets SIGWINCH.
func (p *PTY) Resize(ctx context.Context, cols, rows int) error {
	// Setting a size twice is harmless: re-sent after a dropped connection.
	_, err := p.h.c.call(ctx, "resize", resizeParams{Stream: p.h.id, Cols: cols, Rows: rows}, callOpts{retry: true, once: true})
	return err
}

type resizeParams struct {
	Stream uint64 `json:"stream"`
	Cols   int    `json:"cols"`
	Rows   int    `json:"rows"`
}

// Signal sends a signal to the terminal's foreground job: what Ctrl-C
// reaches. The shell itself survives an interrupted command.
func (p *PTY) Signal(ctx context.Context, sig Signal) error {
	_, err := p.h.c.call(ctx, "signal", signalParams{Stream: p.h.id, Signal: sig}, callOpts{once: true})
	return err
}

// SignalProgram sends a signal to the program the terminal started (the
// shell) alone, as a terminal window that closes sends SIGHUP.
func (p *PTY) SignalProgram(ctx context.Context, sig Signal) error {
	no := false
	_, err := p.h.c.call(ctx, "signal", signalParams{Stream: p.h.id, Signal: sig, Group: &no}, callOpts{once: true})
	return err
}

// Wait blocks until the program ended and all the terminal's output has
// arrived (buffered for Output, or handed to OnOutput, which returned).
// The end comes after the output: read Output (or set OnOutput), or more
// than a window of unread output holds it back.
func (p *PTY) Wait(ctx context.Context) (ExitStatus, error) { return p.h.waitExit(ctx) }

// Done is closed when the handle finished: the end arrived, or it failed.
func (p *PTY) Done() <-chan struct{} { return p.h.done }

// Detach stops receiving the terminal's output; the program runs on and
// any client can attach to it again (AttachPTY). Output then returns
// ErrDetached after what had arrived.
func (p *PTY) Detach(ctx context.Context) error { return p.h.detach(ctx) }

// Gaps returns the gaps the agent announced so far on this handle.
func (p *PTY) Gaps() []GapError { return p.h.recordedGaps() }

// Cursors returns what the application consumed ("pty"): attach from it
// to continue where this handle stopped.
func (p *PTY) Cursors() map[string]uint64 { return p.h.cursors(true) }
