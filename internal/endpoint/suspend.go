package endpoint

import (
	"context"
	"sync"
)

// Suspending sends {"event": "suspending", "generation": gen} on every
// connection, and has the hello of connections opened from now until
// Resumed say "suspending": true, so a client knows that the silence
// that follows is a pause, not a broken network. It returns once each
// connection's writer has handed the event to its socket, or ctx ends,
// with the number of connections told.
func (s *Server) Suspending(ctx context.Context, gen uint64) int {
	s.suspending.Store(true)
	return s.tellAll(ctx, map[string]any{"event": "suspending", "generation": gen})
}

// Resumed sends {"event": "resumed", "generation": gen, "aborted": bool}
// on every connection, without waiting: the pause is over (aborted: it
// was called off, and the generation is the one before it).
func (s *Server) Resumed(gen uint64, aborted bool) {
	s.suspending.Store(false)
	s.tellAll(nil, map[string]any{"event": "resumed", "generation": gen, "aborted": aborted})
}

// tellAll queues ev on every session's control queue; with ctx, it waits
// until each is written (or its session ends) or ctx ends.
func (s *Server) tellAll(ctx context.Context, ev map[string]any) int {
	msg, _ := jsonBytes(ev)
	type queued struct {
		ss      *Session
		written chan struct{}
	}
	var told []queued
	for _, ss := range s.Sessions() {
		q := queued{ss: ss, written: make(chan struct{})}
		f := outFrame{msg: msg, lifecycle: true, release: sync.OnceFunc(func() { close(q.written) })}
		ss.out.pending.Add(1)
		select {
		case ss.ctrl <- f:
			told = append(told, q)
		default:
			// A control queue full of answers the client does not read:
			// the event is not worth blocking a pause for.
			ss.dropQueued(f)
		}
	}
	if ctx == nil {
		return len(told)
	}
	for _, q := range told {
		select {
		case <-q.written:
		case <-q.ss.ctx.Done():
		case <-ctx.Done():
			return len(told)
		}
	}
	return len(told)
}
