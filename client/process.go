package client

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/rayito/rayito-agent/internal/wire"
)

// Overflow is what a stream does when its retention buffer is full.
type Overflow string

const (
	// OverflowBlock stops reading the process until clients acknowledge
	// (the default for exec), within the grace period.
	OverflowBlock Overflow = "block"
	// OverflowDrop discards the oldest output; readers see a *GapError.
	OverflowDrop Overflow = "drop"
)

// ExecOptions describe a command to run. Give Argv, or Cmd for a shell
// command line.
type ExecOptions struct {
	Argv []string
	Cmd  string
	Env  map[string]string
	Cwd  string
	User string
	Tag  string
	// Stdin gives the process a stdin pipe fed by Process.Write; without
	// it stdin is /dev/null.
	Stdin bool
	// Timeout kills the process group (TERM, then KILL 2 s later) once it
	// has run this long; 0 means never.
	Timeout time.Duration
	// Buffer is the agent's retention per channel in bytes; 0: 4 MiB.
	Buffer   int
	Overflow Overflow
	// Grace is how long a block stream keeps blocking after its last
	// client left; nil: 30 s, 0: not at all.
	Grace *time.Duration
	// KeepAwake holds the sandbox's idle clock while the command runs, so
	// a silent job is not suspended midway (up to the agent's
	// --max-hold-seconds); Process.Hold names the hold.
	KeepAwake bool
	// OnStdout and OnStderr, if set, receive the channel's bytes in order
	// on a goroutine of their own; the slice is valid during the call.
	// The bytes are acknowledged once the call returns, so a slow callback
	// slows the process (block) rather than piling up memory.
	OnStdout, OnStderr func([]byte)
}

type execParams struct {
	Argv      []string          `json:"argv,omitempty"`
	Cmd       string            `json:"cmd,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	User      string            `json:"user,omitempty"`
	Stdin     bool              `json:"stdin,omitempty"`
	Tag       string            `json:"tag,omitempty"`
	TimeoutMs int64             `json:"timeout_ms,omitempty"`
	Buffer    int               `json:"buffer,omitempty"`
	Overflow  Overflow          `json:"overflow,omitempty"`
	GraceMs   *int64            `json:"grace_ms,omitempty"`
	KeepAwake bool              `json:"keep_awake,omitempty"`
}

// ceilMs converts a duration to whole milliseconds, rounding up so a short
// positive duration never becomes "none".
func ceilMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Process is a command's stream: its output, input, signals and exit.
//
// Concurrency: read each of Stdout and Stderr from one goroutine at a
// time (the two may be read in parallel); Write from one goroutine at a
// time; everything else from anywhere.
type Process struct {
	h    *handle
	pid  int
	hold string

	wmu   sync.Mutex
	frame []byte // IN frame being written
}

// Exec runs a command and attaches to its output. The request is never
// re-sent: if the connection drops before the answer, Exec fails with
// ErrConnectionLost and the command may or may not be running (find it
// with List, by Tag).
func (c *Client) Exec(ctx context.Context, o ExecOptions) (*Process, error) {
	p := execParams{
		Argv: o.Argv, Cmd: o.Cmd, Env: o.Env, Cwd: o.Cwd, User: o.User, Stdin: o.Stdin, Tag: o.Tag,
		TimeoutMs: ceilMs(o.Timeout), Buffer: o.Buffer, Overflow: o.Overflow, KeepAwake: o.KeepAwake,
	}
	if o.Grace != nil {
		ms := ceilMs(max(*o.Grace, 0))
		p.GraceMs = &ms
	}
	h, r, err := c.create(ctx, "exec", p, KindProcess, outputs{wire.ChanStdout: o.OnStdout, wire.ChanStderr: o.OnStderr})
	if err != nil {
		return nil, err
	}
	return &Process{h: h, pid: r.Pid, hold: r.Hold}, nil
}

// Stream is the agent's id of the process's stream.
func (p *Process) Stream() uint64 { return p.h.id }

// Hold is the id of the hold that ExecOptions.KeepAwake made ("" if
// none); Client.ReleaseHold ends it early.
func (p *Process) Hold() string { return p.hold }

// Pid is the process id inside the sandbox (0 if unknown).
func (p *Process) Pid() int { return p.pid }

// Stdout returns the process's standard output, in order, from this
// handle's start cursor. It returns io.EOF after the process ended and
// all its output was read, a *GapError once where the agent dropped data
// (read on after it), and ErrCallbackOwnsOutput if OnStdout was set.
// Reading is what acknowledges: output nobody reads holds a block stream.
func (p *Process) Stdout() io.Reader { return p.h.bytes[wire.ChanStdout] }

// Stderr is Stdout for standard error.
func (p *Process) Stderr() io.Reader { return p.h.bytes[wire.ChanStderr] }

// Write sends input to the process's stdin (started with Stdin). It
// waits while the agent holds 1 MiB the process has not read yet (the
// process reads at its own pace), and each byte reaches the process once
// and in order across reconnects and resumes: the client keeps what the
// agent has not written yet and sends it again after a reconnect
// (input.go). Against an agent without input offsets, input beyond the
// agent's 1 MiB queue is refused instead and fails later writes with a
// `limit` *Error, and input in flight when a connection drops may be lost.
func (p *Process) Write(b []byte) (int, error) { return p.WriteContext(context.Background(), b) }

// WriteContext is Write that stops waiting for room when ctx ends.
func (p *Process) WriteContext(ctx context.Context, b []byte) (int, error) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := p.h.inputError(); err != nil {
		return 0, err
	}
	n, numbered, err := p.h.input.write(ctx, b)
	if numbered || err != nil {
		return n, err
	}
	m, err := p.h.writeInput(&p.frame, b[n:])
	return n + m, err
}

// CloseStdin closes the process's stdin once the input already written
// has been delivered.
func (p *Process) CloseStdin(ctx context.Context) error {
	p.wmu.Lock() // after any Write in progress
	defer p.wmu.Unlock()
	if err := p.h.inputError(); err != nil {
		return err
	}
	if p.h.input.numbered() {
		return p.h.input.closeAt(ctx)
	}
	_, err := p.h.c.call(ctx, "close_stdin", streamRef{Stream: p.h.id}, callOpts{once: true})
	return err
}

// Signal sends a signal to the process's whole process group.
func (p *Process) Signal(ctx context.Context, sig Signal) error {
	_, err := p.h.c.call(ctx, "signal", signalParams{Stream: p.h.id, Signal: sig}, callOpts{once: true})
	return err
}

type signalParams struct {
	Stream uint64 `json:"stream"`
	Signal Signal `json:"signal"`
	Group  *bool  `json:"group,omitempty"` // nil: the process group
}

// Wait blocks until the process ended and all its output has arrived
// (buffered for the readers, or handed to the callbacks, which have
// returned). Output nobody reads can hold the process back: read Stdout
// and Stderr, or set the callbacks.
func (p *Process) Wait(ctx context.Context) (ExitStatus, error) { return p.h.waitExit(ctx) }

// waitExit waits for the end of a process or terminal and reads its exit
// status.
func (h *handle) waitExit(ctx context.Context) (ExitStatus, error) {
	end, err := h.wait(ctx)
	if err != nil {
		return ExitStatus{}, err
	}
	switch end.Reason {
	case ReasonExit:
		return ExitStatus{Code: end.ExitCode, Signal: Signal(end.Signal), Message: end.Message}, nil
	case ReasonOOMKilled:
		return ExitStatus{Signal: Signal(end.Signal), OOMKilled: true, Message: end.Message}, nil
	case ReasonError:
		return ExitStatus{}, fmt.Errorf("%w: %s", ErrStreamFailed, end.Message)
	}
	return ExitStatus{}, fmt.Errorf("%w: stream %d ended with reason %q", ErrStreamFailed, h.id, end.Reason)
}

// Done is closed when the handle finished: the end arrived, or it failed.
func (p *Process) Done() <-chan struct{} { return p.h.done }

// Detach stops receiving the process's output; the process runs on and
// any client can attach to it again. Readers then return ErrDetached
// after the output that had arrived.
func (p *Process) Detach(ctx context.Context) error { return p.h.detach(ctx) }

// Gaps returns the gaps the agent announced so far on this handle.
func (p *Process) Gaps() []GapError { return p.h.recordedGaps() }

// Cursors returns what the application consumed per channel: attach from
// these (AttachOptions.From) to continue where this handle stopped.
func (p *Process) Cursors() map[string]uint64 { return p.h.cursors(true) }

// ExitStatus is how a process ended: an exit code, or a signal.
type ExitStatus struct {
	Code   *int   // nil if killed by a signal
	Signal Signal // "SIGKILL"..., "" if it exited
	// OOMKilled: the kernel's OOM killer sent the SIGKILL (the sandbox's
	// user work reached its memory limit), or the agent's memory guard
	// did (user work thrashed at that limit).
	OOMKilled bool
	// Message says why the agent or the kernel ended the process, where
	// one of them did: the OOM killer, or the agent's process guard
	// ("killed by the agent's process guard: the command had N
	// processes, more than M").
	Message string
}

// ExitCode returns the exit code as a shell reports it: the code, or 128
// plus the signal's number (Linux numbering), or -1 if unknown.
func (s ExitStatus) ExitCode() int {
	if s.Code != nil {
		return *s.Code
	}
	if n := signalNumber(string(s.Signal)); n > 0 {
		return 128 + n
	}
	return -1
}

func (s ExitStatus) String() string {
	if s.Code != nil {
		return fmt.Sprintf("exit code %d", *s.Code)
	}
	return "killed by " + string(s.Signal)
}
