package endpoint

import (
	"encoding/json"

	"github.com/rayito/rayito-agent/internal/wire"
)

// op is one protocol operation. Slow ops (those that fork, start kernels or
// wait) run on their own goroutine so the connection keeps reading acks and
// input meanwhile; quick ones run in order on the reader goroutine, and so
// do brief ones (file ops) unless they block (brief.go). Ordered
// ops are slow ops whose effects must follow the order of the requests
// (cells queue on a kernel in the order the client sent them): they run
// one at a time, in order, on the session's ordered worker.
type op struct {
	fn      func(c *call) (any, error)
	slow    bool // runs on a goroutine of its own: it may take long
	brief   bool // runs on the reader unless it blocks (brief.go)
	ordered bool
}

// call is one request being handled.
type call struct {
	ss  *Session
	req wire.Request
	// after runs once the response is queued: an attachment's data must
	// never overtake the response that announces its stream.
	after func()
}

func (c *call) params(v any) error { return c.req.Params(v) }

// protocolOps lists every op of the protocol, so an op whose capability is
// not wired answers `unsupported` rather than `unknown op`.
var protocolOps = []string{
	"exec", "pty", "resize", "signal", "close_stdin", "attach", "detach", "ack", "list",
	"watch", "unwatch", "kernel_start", "kernel_list", "kernel_interrupt", "kernel_restart",
	"kernel_shutdown", "execute", "input_reply", "kernel_channels", "jupyter_send",
	"hold", "release",
	"file_stat", "file_list", "file_mkdir", "file_move", "file_remove", "file_chmod", "file_chown",
	"file_read", "file_write",
}

func (s *Server) buildOps() map[string]op {
	ops := map[string]op{}
	s.streamOps(ops)
	s.holdOps(ops)
	if s.cfg.Procs != nil {
		s.execOps(ops)
	}
	if s.cfg.PTYs != nil {
		s.ptyOps(ops)
	}
	if s.cfg.Watches != nil {
		s.watchOps(ops)
	}
	if s.cfg.Kernels != nil {
		s.kernelOps(ops)
	}
	if s.cfg.Files != nil {
		s.fileOps(ops)
	}
	for _, name := range protocolOps {
		if _, ok := ops[name]; !ok {
			ops[name] = op{fn: unsupported(name)}
		}
	}
	return ops
}

func unsupported(name string) func(*call) (any, error) {
	return func(*call) (any, error) {
		return nil, wire.Errorf(wire.CodeUnsupported, "op %q is not available in this agent", name)
	}
}

// handleControl decodes and dispatches one text frame. It answers true
// when a brief op passed the reading of the connection to another
// goroutine.
func (ss *Session) handleControl(msg []byte) (handedOff bool) {
	req, err := wire.DecodeRequest(msg)
	if err != nil {
		ss.fail(req, err)
		return
	}
	o, ok := ss.srv.ops[req.Op]
	if !ok {
		ss.fail(req, wire.Errorf(wire.CodeBadRequest, "unknown op %q", req.Op))
		return
	}
	if req.Op == "ack" {
		// ack has no response; its errors come back as error events.
		if _, err := o.fn(&call{ss: ss, req: req}); err != nil {
			ss.sendError(wire.AsError(err), ackedStream(req))
		}
		return
	}
	if !req.HasID {
		ss.fail(req, wire.Errorf(wire.CodeBadRequest, "op %q needs an id", req.Op))
		return
	}
	if !o.slow && !o.brief && !o.ordered {
		ss.respond(&call{ss: ss, req: req}, o)
		return
	}
	select {
	case ss.sem <- struct{}{}:
	default:
		ss.fail(req, wire.Errorf(wire.CodeLimit, "more than %d slow requests in flight on this connection", maxInflightOps))
		return
	}
	if o.brief {
		defer func() { <-ss.sem }()
		return ss.runBrief(&call{ss: ss, req: req}, o)
	}
	run := func() {
		defer func() { <-ss.sem }()
		ss.respond(&call{ss: ss, req: req}, o)
	}
	if o.ordered {
		// The queue holds as many as the semaphore allows, so this send
		// never blocks the reader.
		ss.orderedOnce.Do(func() { go ss.orderedLoop() })
		ss.ordered <- run
		return
	}
	go run()
	return
}

// orderedLoop runs ordered ops one at a time until the session ends.
func (ss *Session) orderedLoop() {
	for {
		select {
		case run := <-ss.ordered:
			run()
		case <-ss.ctx.Done():
			return
		}
	}
}

func (ss *Session) respond(c *call, o op) {
	result, err := o.fn(c)
	if err != nil {
		ss.sendControl(wire.ErrorResponse(c.req.ID, wire.AsError(err)))
		return
	}
	b, err := wire.Response(c.req.ID, result)
	if err != nil {
		ss.sendControl(wire.ErrorResponse(c.req.ID, wire.AsError(err)))
		return
	}
	ss.sendControl(b)
	if c.after != nil {
		c.after()
	}
}

// fail answers a request that could not be dispatched.
func (ss *Session) fail(req wire.Request, err error) {
	if req.HasID {
		ss.sendControl(wire.ErrorResponse(req.ID, wire.AsError(err)))
	} else {
		ss.sendError(wire.AsError(err), 0)
	}
}

// ackedStream is the stream an ack names, 0 if it cannot be read: its
// error events carry it, since there is no response id to tie them to.
func ackedStream(req wire.Request) uint64 {
	var p struct {
		Stream uint64 `json:"stream"`
	}
	json.Unmarshal(req.Raw, &p)
	return p.Stream
}

func jsonBytes(v any) ([]byte, error) { return json.Marshal(v) }
