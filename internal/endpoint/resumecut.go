package endpoint

import (
	"context"

	"github.com/rayito/rayito-agent/internal/stream"
)

// resumeCut sends `end` reason resume on every attachment, after the data
// already queued, then closes the connection with 4000 "resumed". The
// resume cut's registry (surface.Cuts) calls it for every session older
// than the resume; it returns when the close frame is handed to the
// connection, or when ctx ends (the connection is then dropped without one).
func (ss *Session) resumeCut(ctx context.Context, _ uint64) {
	if !ss.setClose(closeResumed, "resumed") {
		return
	}
	ss.mu.Lock()
	ss.cutting = true
	ss.mu.Unlock()
	ss.cut(stream.End{Reason: stream.ReasonResume})
	pumpsDone := make(chan struct{})
	go func() { ss.pumps.Wait(); close(pumpsDone) }()
	select {
	case <-pumpsDone:
	case <-ctx.Done():
		ss.conn.CloseNow()
		return
	}
	written := make(chan struct{})
	select {
	case ss.data <- outFrame{close: true, release: func() { close(written) }}:
	case <-ss.ctx.Done():
		return
	case <-ctx.Done():
		ss.conn.CloseNow()
		return
	}
	select {
	case <-written:
	case <-ss.ctx.Done():
	case <-ctx.Done():
		ss.conn.CloseNow()
	}
}
