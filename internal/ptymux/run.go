package ptymux

import (
	"errors"
	"io"
	"os"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/stream"
)

// readSize is one read from the master; a pty rarely has more ready.
const readSize = 32 << 10

// lifetime bounds a program's run: at limit (0: never) the terminal is
// hung up, and killAfter later whatever ignored that is killed.
type lifetime struct {
	limit, killAfter time.Duration
}

// run owns the PTY from start to end: it starts the output pump, waits for
// the program's exit (or for the manager to give up on it), enforcing its
// lifetime meanwhile, lets the pump drain the master for at most drain,
// then releases everything and finishes the stream. It closes p.done last.
func (p *PTY) run(s *stream.Stream, exit <-chan proc.Status, drain time.Duration, life lifetime) {
	defer close(p.done)
	go p.pump(s.Log(Channel))

	var expired, kill <-chan time.Time
	if life.limit > 0 {
		t := time.NewTimer(life.limit)
		defer t.Stop()
		expired = t.C
	}
	var end stream.End
wait:
	for {
		select {
		case st := <-exit:
			end = proc.ExitEnd(st)
			break wait
		case <-p.abandoned:
			end = stream.End{Reason: stream.ReasonError, Message: "the agent shut down before the program exited"}
			break wait
		case <-expired:
			expired = nil
			p.log.Debug("pty lifetime over: hanging up", zap.Uint64("stream", s.ID), zap.Int("pid", p.pid))
			p.hangup()
			t := time.NewTimer(life.killAfter)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			p.kill()
		}
	}
	p.mu.Lock()
	p.exited = true
	p.mu.Unlock()

	// Output the program wrote just before exiting is still in the
	// terminal; EIO comes once every holder of the slave has closed it.
	if err := p.master.SetReadDeadline(time.Now().Add(drain)); err != nil {
		p.closeMaster() // already closed by a hangup: the pump has stopped
	}
	<-p.readerDone
	p.closeMaster()
	p.input.Stop()
	s.Finish(end)
	p.log.Debug("pty ended", zap.Uint64("stream", s.ID), zap.Int("pid", p.pid), zap.Any("end", end))
}

// pump copies the terminal's output into the log until the master reads
// EIO (no slave holder left), hits the drain deadline, or is closed.
func (p *PTY) pump(l *stream.Log) {
	defer close(p.readerDone)
	buf := make([]byte, readSize)
	for {
		n, err := p.master.Read(buf)
		if n > 0 {
			if _, werr := l.Write(buf[:n]); werr != nil {
				return
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, unix.EIO), errors.Is(err, io.EOF), errors.Is(err, os.ErrClosed):
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			p.log.Info("pty output drain cut short: a background process keeps the terminal open",
				zap.Uint64("stream", p.id.Load()), zap.Int("pid", p.pid))
			return
		default:
			p.log.Warn("pty read failed", zap.Uint64("stream", p.id.Load()), zap.Error(err))
			return
		}
	}
}

// closeMaster hangs the terminal up. Safe to call more than once.
func (p *PTY) closeMaster() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeMasterLocked()
}

func (p *PTY) closeMasterLocked() {
	if !p.hungUp {
		p.hungUp = true
		p.master.Close()
	}
}

// hangup does what closing a terminal window does: the session leader gets
// SIGHUP (and a shell passes it on to its jobs). The foreground group is
// remembered first, since it cannot be asked once the master is closed.
func (p *PTY) hangup() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exited {
		p.fg = p.foregroundLocked()
	}
	p.closeMasterLocked()
}

// kill sends SIGKILL to the program's group and to the last foreground
// group, for programs that ignore a hangup.
func (p *PTY) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return
	}
	unix.Kill(-p.pid, unix.SIGKILL)
	if p.fg > 0 && p.fg != p.pid {
		unix.Kill(-p.fg, unix.SIGKILL)
	}
}

// abandon stops waiting for an exit status that may never come.
func (p *PTY) abandon() {
	p.abandonOnce.Do(func() { close(p.abandoned) })
}
