package ptymux

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// Channel is the name of a PTY stream's only channel.
const Channel = "pty"

// Terminal size bounds, in character cells.
const (
	DefaultCols = 80
	DefaultRows = 24
	// MaxSize bounds each dimension: far beyond any screen, while keeping
	// what a full-screen program allocates per cell reasonable.
	MaxSize = 10000
)

// CheckSize returns a bad_request *wire.Error unless both dimensions are
// within 1..MaxSize. Callers that decode sizes wider than uint16 check them
// here first, so 70000 is refused rather than wrapped around.
func CheckSize(cols, rows int) error {
	if cols < 1 || cols > MaxSize || rows < 1 || rows > MaxSize {
		return wire.Errorf(wire.CodeBadRequest, "terminal size %dx%d is out of range: cols and rows must each be 1 to %d", cols, rows, MaxSize)
	}
	return nil
}

// PTY is one program running in a pseudo-terminal; it is the Control value
// of its stream. All methods are safe for concurrent use and never block on
// the program.
type PTY struct {
	pid    int
	reaper *proc.Reaper
	master *os.File // pollable; owned by run, which closes it last
	input  *stream.Input
	log    *zap.Logger

	id atomic.Uint64 // stream id, for messages; set once registered

	mu         sync.Mutex
	exited     bool // reaped: the pid may now belong to another process
	hungUp     bool // the master is closed
	fg         int  // foreground group seen at hangup
	cols, rows uint16

	readerDone  chan struct{} // closed when pump returns
	abandoned   chan struct{} // closed by the manager to stop waiting for the exit
	abandonOnce sync.Once
	done        chan struct{} // closed after the stream finished
}

func newPTY(pid int, reaper *proc.Reaper, master *os.File, cols, rows uint16, log *zap.Logger) *PTY {
	return &PTY{
		pid: pid, reaper: reaper, master: master, log: log, cols: cols, rows: rows,
		// The input goroutine writes straight to the master; closing the
		// master is what unblocks it when the program stops reading.
		input:      stream.NewInput(master, nil, stream.DefaultInputQueue),
		readerDone: make(chan struct{}),
		abandoned:  make(chan struct{}),
		done:       make(chan struct{}),
	}
}

// Pid is the program's pid; it leads the terminal's session.
func (p *PTY) Pid() int { return p.pid }

// Size returns the terminal's current size.
func (p *PTY) Size() (cols, rows uint16) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cols, p.rows
}

// Signal sends sig to the terminal's foreground process group (group), the
// job a user at the keyboard would interrupt, or to the program alone.
func (p *PTY) Signal(sig syscall.Signal, group bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return p.errEnded()
	}
	target := p.pid
	var err error
	if group {
		target = -p.foregroundLocked()
		if -target == p.pid {
			// The program's own group: through the reaper, which refuses
			// the number if the program was reaped a moment ago and
			// another process took it.
			err = p.reaper.Kill(p.pid, sig, true)
		} else {
			err = unix.Kill(target, sig)
		}
	} else {
		err = p.reaper.Kill(p.pid, sig, false)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EINVAL):
		return wire.Errorf(wire.CodeBadRequest, "invalid signal %d", int(sig))
	case errors.Is(err, unix.ESRCH) && group:
		return wire.Errorf(wire.CodeConflict, "pty %d: foreground process group %d is gone", p.id.Load(), -target)
	case errors.Is(err, unix.ESRCH):
		return p.errEnded() // exited, not yet reaped
	default:
		return wire.Errorf(wire.CodeInternal, "pty %d: kill %d: %v", p.id.Load(), target, err)
	}
}

// WriteInput queues keystrokes for the terminal, in order. It fails with a
// limit error when 1 MiB is already waiting for a program that is not
// reading, and with a conflict once the program has exited.
func (p *PTY) WriteInput(b []byte) error {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	if exited {
		return p.errEnded()
	}
	switch err := p.input.Write(b); {
	case err == nil:
		return nil
	case errors.Is(err, stream.ErrInputFull):
		return wire.Errorf(wire.CodeLimit, "pty %d: input queue is full (%d bytes): the program is not reading", p.id.Load(), stream.DefaultInputQueue)
	default:
		return p.errEnded()
	}
}

// WriteInputAt is WriteInput for keystrokes that start at offset off of
// the terminal's input (stream/input_offsets.go).
func (p *PTY) WriteInputAt(off uint64, b []byte) error {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	if exited {
		return p.errEnded()
	}
	switch err := p.input.WriteAt(off, b); {
	case err == nil:
		return nil
	case errors.Is(err, stream.ErrInputGap):
		return wire.Errorf(wire.CodeBadRequest, "pty %d: %v", p.id.Load(), err)
	case errors.Is(err, stream.ErrInputFull):
		return wire.Errorf(wire.CodeLimit, "pty %d: input queue is full (%d bytes): the program is not reading", p.id.Load(), stream.DefaultInputQueue)
	default:
		return p.errEnded()
	}
}

// WriteInputWait queues all of b or none of it, waiting for room while
// the program is not reading, until ctx ends (envd's SendInput).
func (p *PTY) WriteInputWait(ctx context.Context, b []byte) error {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	if exited {
		return p.errEnded()
	}
	switch err := p.input.WriteWait(ctx, b); {
	case err == nil:
		return nil
	case ctx.Err() != nil && err == ctx.Err():
		return wire.Errorf(wire.CodeUnavailable, "pty %d: the program did not read in time (%v); nothing of this input was written", p.id.Load(), err)
	default:
		return p.errEnded()
	}
}

// Input is the terminal's input queue.
func (p *PTY) Input() *stream.Input { return p.input }

// Resize sets the terminal's size; the foreground job gets SIGWINCH.
func (p *PTY) Resize(cols, rows uint16) error {
	if err := CheckSize(int(cols), int(rows)); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited || p.hungUp {
		return p.errEnded()
	}
	if err := setSize(p.master, cols, rows); err != nil {
		return wire.Errorf(wire.CodeInternal, "pty %d: resize: %v", p.id.Load(), err)
	}
	p.cols, p.rows = cols, rows
	return nil
}

// CloseInput is refused: a terminal has no end of input. Ctrl-D (0x04) is
// only an EOF to a program that reads lines, and it is the client's to send.
func (p *PTY) CloseInput() error {
	return wire.Errorf(wire.CodeUnsupported, "close_stdin does not apply to a pty")
}

// CloseInputAt is refused as CloseInput is, whatever the offset.
func (p *PTY) CloseInputAt(uint64) error { return p.CloseInput() }

// foregroundLocked returns the terminal's foreground process group, or
// after a hangup the last one seen, or else the program's own group.
func (p *PTY) foregroundLocked() int {
	if !p.hungUp {
		if pg, err := foreground(p.master); err == nil && pg > 0 {
			return pg
		}
	}
	if p.fg > 0 {
		return p.fg
	}
	return p.pid
}

func (p *PTY) errEnded() error {
	return wire.Errorf(wire.CodeConflict, "pty %d has ended", p.id.Load())
}
