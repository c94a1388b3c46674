package endpoint

import (
	"encoding/json"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// repeat answers a request whose op_id is known (outcomes.go) with the
// first request's outcome, once it has one: on a goroutine of its own,
// so the reader goes on meanwhile. A repeat of a request that made a
// stream attaches this connection to it from the start (unless it says
// "attach": false), as the first did its own, takes its input over (an
// upload's, as attach does) and says its input cursors as they are now.
func (ss *Session) repeat(c *call, rec *outcome) {
	select {
	case ss.sem <- struct{}{}:
	default:
		ss.fail(c.req, wire.Errorf(wire.CodeLimit, "more than %d slow requests in flight on this connection", maxInflightOps))
		return
	}
	go func() {
		defer func() { <-ss.sem }()
		select {
		case <-rec.done:
		case <-ss.ctx.Done():
			ss.answered()
			return
		}
		if rec.notRun {
			// The first never ran: its connection ended first. Run it
			// here, as a slow op.
			next, first, err := ss.srv.outcomes.begin(ss.srv.instance(), c.req)
			switch {
			case err != nil:
				ss.fail(c.req, err)
			case first:
				c.outcome = next
				ss.respond(c, ss.srv.ops[c.req.Op])
			default:
				ss.repeat(c, next) // another repeat got there first
			}
			return
		}
		defer ss.answered()
		if rec.err != nil {
			ss.sendControl(wire.ErrorResponse(c.req.ID, rec.err))
			return
		}
		result := rec.result
		if rec.stream != 0 {
			var err error
			if result, err = ss.reattachMade(c, rec); err != nil {
				ss.sendControl(wire.ErrorResponse(c.req.ID, opError(c.req.Op, err)))
				return
			}
		}
		ss.sendResult(c, result)
	}()
}

// reattachMade attaches this connection to the stream a repeated request
// made, and returns the first answer with the input cursors of now.
func (ss *Session) reattachMade(c *call, rec *outcome) (any, error) {
	m, ok := rec.result.(map[string]any)
	if !ok {
		return rec.result, nil
	}
	result := make(map[string]any, len(m))
	for k, v := range m {
		result[k] = v
	}
	st := ss.srv.cfg.Streams.Get(rec.stream)
	if st == nil {
		return nil, wire.Errorf(wire.CodeExpired, "op_id %q made stream %d, which has expired since; it is not run again", rec.id, rec.stream)
	}
	var p struct {
		Attach *bool `json:"attach"`
	}
	json.Unmarshal(c.req.Raw, &p) // the first request's parameters decoded
	if p.Attach != nil && !*p.Attach || ss.attached(st.ID) != nil {
		return result, nil
	}
	if err := ss.reserve(); err == errClosing {
		return result, nil // the client attaches after it reconnects
	} else if err != nil {
		return nil, err
	}
	start, err := ss.attach(st, nil, stream.DefaultWindow, true)
	if err != nil {
		// The connection is closing: answer anyway, as create does.
		return result, nil
	}
	c.after = start
	ss.takeOver(st, result)
	ss.inputCursors(st, result)
	return result, nil
}
