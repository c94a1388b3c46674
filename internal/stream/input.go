package stream

import (
	"errors"
	"io"
	"sync"
)

// DefaultInputQueue is how much input may wait for a producer that is not
// reading, from the protocol; beyond it input is refused, never dropped.
const DefaultInputQueue = 1 << 20

var (
	ErrInputFull   = errors.New("stream: input queue full")
	ErrInputClosed = errors.New("stream: input closed")
)

// Input feeds client input to a producer (a process's stdin, a pty) without
// ever blocking the connection that delivered it: writes are queued, up to a
// bound, and one goroutine owned by the Input copies them in order.
type Input struct {
	w       io.Writer
	closeFn func() error // run after the queue drains on CloseInput; may be nil
	max     int

	mu      sync.Mutex
	queue   [][]byte
	queued  int
	closing bool // CloseInput called: refuse writes, close after draining
	failed  error
	wake    chan struct{}
	done    chan struct{}
}

// NewInput starts copying to w. closeFn, if not nil, runs once the queue is
// drained after CloseInput (for stdin: close the pipe so the reader sees
// EOF). max <= 0 picks DefaultInputQueue.
func NewInput(w io.Writer, closeFn func() error, max int) *Input {
	if max <= 0 {
		max = DefaultInputQueue
	}
	in := &Input{w: w, closeFn: closeFn, max: max, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go in.run()
	return in
}

// Write queues a copy of p. It fails with ErrInputFull when the queue holds
// max bytes, and with ErrInputClosed after CloseInput or a failed write.
func (in *Input) Write(p []byte) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	switch {
	case in.closing || in.failed != nil:
		return ErrInputClosed
	case in.queued+len(p) > in.max:
		return ErrInputFull
	}
	in.queue = append(in.queue, append([]byte(nil), p...))
	in.queued += len(p)
	in.signal()
	return nil
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

func (in *Input) signal() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

func (in *Input) run() {
	defer close(in.done)
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
		if err != nil && in.failed == nil {
			in.failed = err
		}
		in.mu.Unlock()
	}
}
