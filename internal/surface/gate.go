package surface

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

// A gate stops every listener's accepts for a handover without closing
// them: clients that connect meanwhile wait in the listen backlog, and
// whoever holds the listeners next (the same agent after a failed
// handover, or the new one) accepts them. A listener's pending Accept is
// woken by a deadline in the past; the gated Accept then waits for the
// gate to open again.
type gate struct {
	mu     sync.Mutex
	shut   bool
	opened chan struct{} // closed while the gate is open
	ls     map[*gatedListener]struct{}
}

func newGate() *gate {
	g := &gate{opened: make(chan struct{}), ls: map[*gatedListener]struct{}{}}
	close(g.opened)
	return g
}

// deadliner is a listener whose Accept a deadline wakes (TCP, vsock,
// Unix).
type deadliner interface {
	SetDeadline(t time.Time) error
}

type gatedListener struct {
	net.Listener
	g *gate
}

func (g *gate) wrap(l net.Listener) net.Listener {
	gl := &gatedListener{Listener: l, g: g}
	g.mu.Lock()
	g.ls[gl] = struct{}{}
	g.mu.Unlock()
	return gl
}

func (l *gatedListener) Accept() (net.Conn, error) {
	for {
		l.g.mu.Lock()
		opened := l.g.opened
		l.g.mu.Unlock()
		<-opened
		c, err := l.Listener.Accept()
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return c, err
		}
		// Woken by close: wait for the gate to open again.
	}
}

func (l *gatedListener) Close() error {
	l.g.mu.Lock()
	delete(l.g.ls, l)
	l.g.mu.Unlock()
	return l.Listener.Close()
}

// close stops the accepts; it returns the listeners a deadline cannot
// wake (their Accept may still take one connection).
func (g *gate) close() (unwoken int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut {
		return 0
	}
	g.shut = true
	g.opened = make(chan struct{})
	for l := range g.ls {
		d, ok := l.Listener.(deadliner)
		if !ok || d.SetDeadline(time.Unix(1, 0)) != nil {
			unwoken++
		}
	}
	return unwoken
}

// open lets the accepts go on.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.shut {
		return
	}
	g.shut = false
	for l := range g.ls {
		if d, ok := l.Listener.(deadliner); ok {
			d.SetDeadline(time.Time{})
		}
	}
	close(g.opened)
}
