package stream

import (
	"errors"
	"io"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// DefaultInputQueue is how much input may wait for a producer that is not
// reading, from the protocol; beyond it input is refused, never dropped.
const DefaultInputQueue = 1 << 20

var (
	ErrInputFull   = errors.New("stream: input queue full")
	ErrInputClosed = errors.New("stream: input closed")
	// ErrInputGap: an input frame starts past what was received: input
	// in between was lost on the way (protocol section 5).
	ErrInputGap = errors.New("stream: input would leave a gap")
	// ErrInputEOF: an end of input at an offset below what was received.
	ErrInputEOF = errors.New("stream: end of input before input already received")
)

// InputProgressEvery is how much written input makes the Input report
// progress: a quarter of the queue, so that a client whose window is the
// queue always has three quarters of it to send in while the report is
// on its way.
const InputProgressEvery = DefaultInputQueue / 4

// Input feeds client input to a producer (a process's stdin, a pty) without
// ever blocking the connection that delivered it: writes are queued, up to a
// bound, and one goroutine owned by the Input copies them in order.
type Input struct {
	w       io.Writer
	try     syscall.RawConn // w's descriptor when it is non-blocking, else nil
	closeFn func() error    // run after the queue drains on CloseInput; may be nil
	max     int

	mu      sync.Mutex
	queue   [][]byte
	queued  int
	closing bool // CloseInput called: refuse writes, close after draining
	failed  error
	wake    chan struct{}
	done    chan struct{}

	// The input cursor (input_offsets.go): bytes accepted (written or
	// queued) and bytes the producer took, since the start.
	received uint64
	written  uint64
	closeAt  int64 // an end of input waiting for received to get there; -1 none
	// progress reports the cursor to every connection feeding the
	// input or attached to it, by key (input_offsets.go).
	progress   map[any]func(received, written uint64)
	lastReport uint64
	due        func() // a report to make once the lock is released
	// budget, if set, is charged what the queue holds (ChargeTo).
	budget *Budget
	// busy runs once, the first time input queues up behind the
	// producer (proc grows the stdin pipe then).
	busy func()
	// room is closed and replaced whenever the queue shrinks or the input
	// ends: WriteWait waits on it.
	room chan struct{}
}

// OnBusy runs fn once, when input first waits in the queue: a producer
// that takes bulk input (a pipe) can be given a larger buffer then, and a
// keystroke-driven one never pays for it.
func (in *Input) OnBusy(fn func()) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.busy = fn
}

// NewInput starts copying to w. closeFn, if not nil, runs once the queue is
// drained after CloseInput (for stdin: close the pipe so the reader sees
// EOF). max <= 0 picks DefaultInputQueue.
func NewInput(w io.Writer, closeFn func() error, max int) *Input {
	if max <= 0 {
		max = DefaultInputQueue
	}
	in := &Input{w: w, closeFn: closeFn, max: max, wake: make(chan struct{}, 1), done: make(chan struct{}), closeAt: -1}
	in.try = nonBlocking(w)
	go in.run()
	return in
}

// nonBlocking returns the raw descriptor of w when w is a non-blocking
// file (a pipe or pty master in Go's poller), for writes that try once.
func nonBlocking(w io.Writer) syscall.RawConn {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	var flags int
	if cerr := rc.Control(func(fd uintptr) { flags, err = unix.FcntlInt(fd, unix.F_GETFL, 0) }); cerr != nil || err != nil {
		return nil
	}
	if flags&unix.O_NONBLOCK == 0 {
		return nil
	}
	return rc
}

// Write queues a copy of p. It fails with ErrInputFull when the queue holds
// max bytes, and with ErrInputClosed after CloseInput or a failed write.
func (in *Input) Write(p []byte) error {
	in.mu.Lock()
	defer in.unlock()
	return in.writeLocked(p)
}

// unlock releases the lock, then makes the report that became due: the
// report sends on a connection, which must not hold up the input.
func (in *Input) unlock() {
	due := in.due
	in.due = nil
	in.mu.Unlock()
	if due != nil {
		due()
	}
}

func (in *Input) writeLocked(p []byte) error {
	switch {
	case in.closing || in.failed != nil:
		return ErrInputClosed
	case in.queued+len(p) > in.max:
		return ErrInputFull
	}
	in.received += uint64(len(p))
	if len(in.queue) == 0 && in.try != nil {
		// Nothing queued or in flight: write now, in the caller, which
		// saves a keystroke the hand-off to the copying goroutine. What
		// does not fit without blocking is queued as usual.
		n, err := in.tryWrite(p)
		if err != nil {
			in.failed = err
			in.signal()
			return ErrInputClosed
		}
		in.written += uint64(n)
		if p = p[n:]; len(p) == 0 {
			in.reportLocked()
			return nil
		}
	}
	in.enqueueLocked(p)
	if busy := in.busy; busy != nil {
		in.busy = nil
		busy() // a fcntl: cheap enough under the lock
	}
	in.signal()
	return nil
}

// enqueueLocked queues a copy of p for the copying goroutine.
func (in *Input) enqueueLocked(p []byte) {
	in.queue = append(in.queue, append([]byte(nil), p...))
	in.queued += len(p)
	in.budget.chargeInput(int64(len(p)))
}

// ChargeTo counts what the queue holds against b, the retention budget,
// from now on: input a program has not read is memory the agent holds
// like retained output, and the output of every stream yields to it.
// Input within the window is still never refused for it (protocol
// section 5): a queue holds at most its window and goes when its program
// ends.
func (in *Input) ChargeTo(b *Budget) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.budget = b
	b.chargeInput(int64(in.queued))
}

// Ended reports whether the input takes nothing more: its program ended,
// a write failed, or its end was written.
func (in *Input) Ended() bool {
	select {
	case <-in.done:
		return true
	default:
		return false
	}
}

// CloseInput refuses further writes and closes the producer's input once
// what is queued has been written. It does not wait.
func (in *Input) CloseInput() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closing {
		return ErrInputClosed
	}
	in.closing = true
	in.signal()
	return nil
}

// Stop ends the copying goroutine without writing what is still queued
// (the producer is gone) and waits for it.
func (in *Input) Stop() {
	in.mu.Lock()
	if in.failed == nil {
		in.failed = ErrInputClosed
	}
	in.signal()
	in.mu.Unlock()
	<-in.done
}

// tryWrite writes what the descriptor takes without blocking.
func (in *Input) tryWrite(p []byte) (int, error) {
	var n int
	var err error
	cerr := in.try.Write(func(fd uintptr) bool {
		n, err = unix.Write(int(fd), p)
		return true // never wait: the copying goroutine does that
	})
	switch {
	case cerr != nil:
		return 0, cerr
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
		return 0, nil
	case err != nil:
		return 0, err
	}
	return n, nil
}

func (in *Input) signal() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

func (in *Input) run() {
	defer close(in.done)
	defer func() {
		in.mu.Lock()
		// What the producer will never read is let go of now, not when
		// the stream expires: a program that never read its stdin would
		// otherwise keep its whole queue for ten minutes after its end.
		for i := range in.queue {
			in.queue[i] = nil
		}
		in.queue = nil
		in.budget.giveInput(int64(in.queued))
		in.queued = 0
		in.progress = nil
		in.roomLocked() // writers waiting for room learn that the input ended
		in.mu.Unlock()
	}()
	for {
		in.mu.Lock()
		if in.failed != nil {
			in.mu.Unlock()
			return
		}
		if len(in.queue) == 0 {
			if in.closing {
				in.failed = ErrInputClosed
				in.mu.Unlock()
				if in.closeFn != nil {
					in.closeFn()
				}
				return
			}
			in.mu.Unlock()
			<-in.wake
			continue
		}
		p := in.queue[0]
		in.mu.Unlock()

		// The write may block while the producer is not reading; the
		// queue keeps accepting (up to max) meanwhile.
		_, err := in.w.Write(p)

		in.mu.Lock()
		in.queue[0] = nil
		in.queue = in.queue[1:]
		in.queued -= len(p)
		in.budget.giveInput(int64(len(p)))
		if err != nil && in.failed == nil {
			in.failed = err
		}
		if err == nil {
			in.written += uint64(len(p))
			in.reportLocked()
		}
		in.roomLocked()
		in.unlock()
	}
}

// roomLocked wakes writers waiting for room.
func (in *Input) roomLocked() {
	if in.room != nil {
		close(in.room)
		in.room = nil
	}
}
