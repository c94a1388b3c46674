package proc

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// drainIdle bounds how long a stream stays open after its leader exited
// while background members of the group keep the output pipes open but
// write nothing: any output restarts it.
const drainIdle = 2 * time.Second

// drainMax bounds it even when they keep writing, or when a client attached
// to a block stream stops reading: a daemon started in the background must
// not keep the command's stream open forever.
const drainMax = 30 * time.Second

// drainLast is how long readers get, once the pipes are closed at the drain
// bound, to put what they already read into a full log before the stream
// ends anyway.
const drainLast = 100 * time.Millisecond

// groupPoll is how often a group is checked for members after its leader's
// exit, while draining and between SIGTERM and SIGKILL.
const groupPoll = 50 * time.Millisecond

// readSize is the most one read from an output pipe takes: it goes
// straight into the log's memory, whose chunks are at most this big.
const readSize = 256 << 10

// process is a running command; it is its stream's Control.
type process struct {
	m      *Manager
	pid    int
	s      *stream.Stream
	input  *stream.Input // nil without stdin
	stdin  *os.File      // write end of stdin, owned by input
	exited chan struct{} // closed when the leader has been reaped

	// groupGone is set once the group is seen empty after the leader's
	// exit; from then on its number may be another process's.
	groupGone atomic.Bool
	termOnce  sync.Once
}

// run owns the process: it copies output into the logs, enforces the
// timeout, and finishes the stream once the leader exited and the output
// is drained.
func (p *process) run(status <-chan Status, outs []*os.File, timeout time.Duration) {
	defer p.m.forget(p)
	logs := p.s.Logs()
	var writing atomic.Int32   // readers blocked on a full log, not on the pipe
	var progress atomic.Uint64 // bytes read, so output resets the drain clock
	// The last reader to finish closes readersDone itself: no goroutine
	// waits on a WaitGroup to pass the news on.
	var readers atomic.Int32
	readers.Store(int32(len(outs)))
	readersDone := make(chan struct{})
	for i, f := range outs {
		go func() {
			copyOut(f, logs[i], &writing, &progress)
			if readers.Add(-1) == 0 {
				close(readersDone)
			}
		}()
	}

	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	var st Status
wait:
	for {
		select {
		case st = <-status:
			break wait
		case <-timer:
			timer = nil
			p.m.goTerminate(p)
		}
	}
	close(p.exited)
	if p.input != nil {
		p.stdin.Close() // unblocks a write to a pipe nobody reads any more
		p.input.Stop()
	}

	// The leader is gone; wait for the pipes to reach EOF, but not forever
	// if a background member holds them open without producing output,
	// and only drainLast more once the agent shuts down: a reader may be
	// blocked on a full log nobody will read again.
	tick := time.NewTicker(groupPoll)
	idle := time.Duration(0)
	seen := progress.Load()
	limit := time.Now().Add(p.m.drainMax)
	closing := p.m.closing
	drained := false
	for !drained && idle < p.m.drainIdle && time.Now().Before(limit) {
		select {
		case <-readersDone:
			drained = true
		case <-closing:
			closing = nil
			if last := time.Now().Add(drainLast); last.Before(limit) {
				limit = last
			}
		case <-tick.C:
			p.groupAlive() // notice the group's end before its number is reused
			switch now := progress.Load(); {
			case now != seen || writing.Load() != 0:
				seen, idle = now, 0
			default:
				idle += groupPoll
			}
		}
	}
	tick.Stop()
	for _, f := range outs {
		f.Close() // unblocks a reader still waiting on a held-open pipe
	}
	end := ExitEnd(st)
	if !drained {
		// A reader may be blocked on a full block log nobody acknowledges;
		// only the end of the stream releases it.
		select {
		case <-readersDone:
		case <-time.After(drainLast):
			p.s.Finish(end)
		}
	}
	<-readersDone
	p.groupAlive()
	p.s.Finish(end)
}

// copyOut reads a pipe into a log until EOF or until the pipe is closed.
// Each read goes straight into room the log reserved; a reader waiting
// for that room counts in writing (it is blocked on the log, not idle).
func copyOut(f *os.File, l *stream.Log, writing *atomic.Int32, progress *atomic.Uint64) {
	grown := false
	for {
		writing.Add(1)
		room, err := l.Reserve(readSize)
		writing.Add(-1)
		if err != nil {
			return
		}
		n, err := f.Read(room)
		l.Commit(n)
		if n > 0 {
			progress.Add(uint64(n))
		}
		if err != nil {
			return
		}
		if !grown && n >= growAfter {
			grown = true
			if rc, err := f.SyscallConn(); err == nil {
				rc.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize) })
			}
		}
	}
}

// ExitEnd is the end of a stream whose process ended with st.
func ExitEnd(st Status) stream.End {
	e := stream.End{Reason: stream.ReasonExit}
	if st.OOMKilled {
		return stream.End{Reason: stream.ReasonOOMKilled, Signal: "SIGKILL",
			Message: "killed by the kernel's OOM killer: the sandbox's user work reached its memory limit"}
	}
	e.Message = st.KilledBy
	if st.Wait.Signaled() {
		e.Signal = SignalName(st.Wait.Signal())
	} else {
		code := st.Wait.ExitStatus()
		e.ExitCode = &code
	}
	return e
}

// terminate sends SIGTERM to the group and SIGKILL after KillGrace, unless
// the group is gone by then.
func (p *process) terminate() {
	p.termOnce.Do(func() {
		p.killGroup(syscall.SIGTERM)
		deadline := time.NewTimer(KillGrace)
		defer deadline.Stop()
		tick := time.NewTicker(groupPoll)
		defer tick.Stop()
		for {
			select {
			case <-deadline.C:
				p.killGroup(syscall.SIGKILL)
				return
			case <-tick.C:
				if !p.groupAlive() {
					return
				}
			}
		}
	})
}

// groupAlive reports whether the process group may still have members and
// its number is still this command's. While the leader lives (or is an
// unreaped zombie) it is. After the leader's exit the number stays reserved
// only while some member of the group or session lives; once none does, it
// may be given to a new process, and a signal to the group would reach a
// stranger. A process holding the number as its pid means exactly that; an
// empty group means it may happen at any moment. Either way the group is
// gone for good.
func (p *process) groupAlive() bool {
	if p.groupGone.Load() {
		return false
	}
	select {
	case <-p.exited:
	default:
		return true
	}
	if unix.Kill(p.pid, 0) != unix.ESRCH || unix.Kill(-p.pid, 0) == unix.ESRCH {
		p.groupGone.Store(true)
		return false
	}
	return true
}

// killGroup signals the process group if it is still this command's.
// Reaper.Kill refuses a number a stranger took, but not one a later
// command of this agent took (the reaper knows that pid as live again):
// only the process knows its own leader was reaped, hence groupAlive.
func (p *process) killGroup(sig syscall.Signal) error {
	if !p.groupAlive() {
		return syscall.ESRCH
	}
	return p.m.reaper.Kill(p.pid, sig, true)
}

// Signal sends sig to the process group (or only the leader).
func (p *process) Signal(sig syscall.Signal, group bool) error {
	if p.s.Ended() != nil {
		return errEnded(p.s.ID)
	}
	select {
	case <-p.exited:
		if !group {
			return errEnded(p.s.ID)
		}
	default:
	}
	kill := func() error { return p.m.reaper.Kill(p.pid, sig, false) }
	if group {
		kill = func() error { return p.killGroup(sig) }
	}
	if err := ignoreGone(kill()); err != nil {
		return wire.Errorf(wire.CodeInternal, "kill %d: %v", p.pid, err)
	}
	return nil
}

// WriteInput queues bytes for the process's stdin.
func (p *process) WriteInput(b []byte) error {
	if p.input == nil {
		return wire.Errorf(wire.CodeBadRequest, "stream %d was started without stdin (exec with \"stdin\": true)", p.s.ID)
	}
	return inputError(p.s.ID, p.input.Write(b))
}

// CloseInput closes stdin once queued input is written.
func (p *process) CloseInput() error {
	if p.input == nil {
		return wire.Errorf(wire.CodeBadRequest, "stream %d was started without stdin", p.s.ID)
	}
	return inputError(p.s.ID, p.input.CloseInput())
}

// WriteInputAt is WriteInput for input that starts at offset off
// (stream/input_offsets.go).
func (p *process) WriteInputAt(off uint64, b []byte) error {
	if p.input == nil {
		return wire.Errorf(wire.CodeBadRequest, "stream %d was started without stdin (exec with \"stdin\": true)", p.s.ID)
	}
	return inputError(p.s.ID, p.input.WriteAt(off, b))
}

// WriteInputWait queues all of b for stdin or none of it, waiting for room
// while the process is not reading, until ctx ends (envd's SendInput).
func (p *process) WriteInputWait(ctx context.Context, b []byte) error {
	if p.input == nil {
		return wire.Errorf(wire.CodeBadRequest, "stream %d was started without stdin (exec with \"stdin\": true)", p.s.ID)
	}
	if err := p.input.WriteWait(ctx, b); ctx.Err() != nil && err == ctx.Err() {
		return wire.Errorf(wire.CodeUnavailable, "stdin of stream %d: the process did not read in time (%v); nothing of this input was written", p.s.ID, err)
	} else {
		return inputError(p.s.ID, err)
	}
}

// CloseInputAt closes stdin once off bytes of input were received.
func (p *process) CloseInputAt(off uint64) error {
	if p.input == nil {
		return wire.Errorf(wire.CodeBadRequest, "stream %d was started without stdin", p.s.ID)
	}
	return inputError(p.s.ID, p.input.CloseAt(off))
}

// Input is the process's stdin, nil without one.
func (p *process) Input() *stream.Input { return p.input }

func inputError(id uint64, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, stream.ErrInputGap):
		return wire.Errorf(wire.CodeBadRequest, "stdin of stream %d: %v", id, err)
	case errors.Is(err, stream.ErrInputEOF):
		return wire.Errorf(wire.CodeConflict, "stdin of stream %d: %v", id, err)
	case errors.Is(err, stream.ErrInputFull):
		return wire.Errorf(wire.CodeLimit, "stdin queue of stream %d is full (1 MiB): the process is not reading", id)
	case errors.Is(err, stream.ErrInputClosed) && err != stream.ErrInputClosed:
		return wire.Errorf(wire.CodeConflict, "stdin of stream %d: %v", id, err)
	case errors.Is(err, stream.ErrInputClosed), errors.Is(err, io.ErrClosedPipe), errors.Is(err, syscall.EPIPE):
		return wire.Errorf(wire.CodeConflict, "stdin of stream %d is closed", id)
	}
	return wire.Errorf(wire.CodeInternal, "stdin of stream %d: %v", id, err)
}
