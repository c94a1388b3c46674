package surface

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

const (
	// suspendPoll is how often Suspend looks whether the connections are
	// done.
	suspendPoll = 5 * time.Millisecond
	// silentNew is how long a connection accepted just before the
	// suspension may stay silent before it is closed: its request may be
	// on its way (a client writes right after its connect returns).
	silentNew = 100 * time.Millisecond
)

// Suspend stops serving for a handover, by the resume cut's rule: every
// request read gets its answer first, and none is read after. It stops
// every listener's accepts (clients that connect meanwhile wait in the
// backlog), turns keep-alives off (an idle connection is closed, a busy
// one after its answer), cuts every long-lived connection (Surface.Lived)
// and closes connections that sent nothing yet; it returns once no
// connection is left but the hijacked ones it was told to keep (the
// handover's own caller), or ctx's error with what is left. Unsuspend
// undoes it.
func (s *Server) Suspend(ctx context.Context) error {
	s.mu.Lock()
	servers, lived := s.servers, s.lived
	s.mu.Unlock()
	s.gate.close()
	for _, hs := range servers {
		hs.SetKeepAlivesEnabled(false)
	}
	for _, cs := range lived {
		cs.CutForResume(ctx, cs.Generation()+1)
	}
	for {
		busy := s.conns.quiet()
		if busy == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d connections still had a request in flight: %w", busy, context.Cause(ctx))
		case <-time.After(suspendPoll):
		}
	}
}

// Unsuspend serves again after Suspend: the handover failed.
func (s *Server) Unsuspend() {
	s.mu.Lock()
	servers := s.servers
	s.mu.Unlock()
	for _, hs := range servers {
		hs.SetKeepAlivesEnabled(true)
	}
	s.gate.open()
}

// quiet closes the connections that are idle, or new with nothing sent
// for silentNew, and returns how many are still serving a request (or may
// be about to); hijacked ones (the long-lived, cut by their registries;
// the handover's caller) are not counted.
func (t *conns) quiet() (busy int) {
	now := time.Now()
	t.mu.Lock()
	var idle []*conn
	for c := range t.open {
		switch c.state {
		case http.StateIdle:
			idle = append(idle, c)
		case http.StateNew:
			if unread(c.Conn) || now.Sub(c.since) < silentNew {
				busy++
			} else {
				idle = append(idle, c)
			}
		case http.StateActive:
			busy++
		}
	}
	t.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
	return busy
}
