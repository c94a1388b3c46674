package endpoint

import (
	"context"

	"github.com/rayito/rayito-agent/internal/stream"
)

// Cut (a resume's: surface.Cuttable) stops taking requests, waits until those it took are
// answered, sends `end` reason resume on every attachment, after the data
// already queued, then closes the connection with 4000 "resumed". So a
// request the agent read before the cut has run and its answer comes
// before the close frame, and one read after it never runs (section
// 11.13). The resume cut's registry (surface.Cuts) calls it for every
// session older than the resume; it returns when the close frame is
// handed to the connection, or when ctx ends (the connection is then
// dropped without one, and requests still running answer a repeat of
// their op_id only).
func (ss *Session) Cut(ctx context.Context, _ uint64) {
	if !ss.setClose(closeResumed, "resumed") {
		return
	}
	select {
	case <-ss.stopTaking():
	case <-ctx.Done():
		ss.conn.CloseNow()
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
