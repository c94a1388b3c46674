package endpoint

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/rayito/rayito-agent/internal/wire"
)

// op is one protocol operation. Slow ops (those that fork, start kernels or
// wait) run on their own goroutine so the connection keeps reading acks and
// input meanwhile; quick ones run in order on the reader goroutine, and so
// do brief ones (file ops) unless they block (brief.go). Ordered
// ops are slow ops whose effects must follow the order of the requests
// (cells queue on a kernel in the order the client sent them): they run
// one at a time, in order, on the session's ordered worker. Ops that
// start or change something are once ops: a request of one that names an
// op_id runs at most once (outcomes.go).
type op struct {
	fn      func(c *call) (any, error)
	slow    bool // runs on a goroutine of its own: it may take long
	brief   bool // runs on the reader unless it blocks (brief.go)
	ordered bool
	once    bool // changes something: an op_id makes it exactly-once
}

// call is one request being handled.
type call struct {
	ss  *Session
	req wire.Request
	// after runs once the response is queued: an attachment's data must
	// never overtake the response that announces its stream.
	after func()
	// outcome is the request's op_id record, nil without one; made is the
	// stream the request created (create sets it).
	outcome *outcome
	made    uint64
}

func (c *call) params(v any) error { return c.req.Params(v) }

// opEntry is one op of the protocol: its name, whether the capability it
// needs is wired, and how it runs.
type opEntry struct {
	name string
	have bool
	op   op
}

// opTable is every op of the protocol (section 4), once. An op whose
// capability is not wired answers `unsupported` rather than `unknown
// op`. Brief ops (the file ops) are answered in microseconds, but a
// filesystem call may block (a network mount, a full disk) and must not
// hold up the connection's reader for longer than briefLimit. execute and
// jupyter_send are ordered: cells queue on a kernel, and kernel messages
// reach it, in the order the client sent them, and a message sent while
// its kernel restarts waits for the new process off the reader.
func (s *Server) opTable() []opEntry {
	procs, ptys, watches := s.cfg.Procs != nil, s.cfg.PTYs != nil, s.cfg.Watches != nil
	kernels, files := s.cfg.Kernels != nil, s.cfg.Files != nil
	return []opEntry{
		{"exec", procs, op{fn: s.opExec, slow: true, once: true}},
		{"pty", ptys, op{fn: s.opPTY, slow: true, once: true}},
		{"resize", true, op{fn: s.opResize, once: true}},
		{"signal", true, op{fn: s.opSignal, once: true}},
		{"close_stdin", true, op{fn: s.opCloseStdin, once: true}},
		{"attach", true, op{fn: s.opAttach}},
		{"detach", true, op{fn: s.opDetach}},
		{"ack", true, op{fn: s.opAck}},
		{"list", true, op{fn: s.opList}},
		{"watch", watches, op{fn: s.opWatch, slow: true, once: true}},
		{"unwatch", watches, op{fn: s.opUnwatch, once: true}},
		{"kernel_start", kernels, op{fn: s.opKernelStart, slow: true, once: true}},
		{"kernel_list", kernels, op{fn: s.opKernelList}},
		{"kernel_interrupt", kernels, op{fn: s.kernelOp(func(_ context.Context, id string) error { return s.cfg.Kernels.Interrupt(id) }), once: true}},
		{"kernel_restart", kernels, op{fn: s.kernelOp(func(ctx context.Context, id string) error { return s.cfg.Kernels.Restart(ctx, id) }), slow: true, once: true}},
		{"kernel_shutdown", kernels, op{fn: s.kernelOp(func(ctx context.Context, id string) error { return s.cfg.Kernels.Shutdown(ctx, id) }), slow: true, once: true}},
		{"execute", kernels, op{fn: s.opExecute, ordered: true, once: true}},
		{"input_reply", kernels, op{fn: s.opInputReply, once: true}},
		{"kernel_channels", kernels, op{fn: s.opKernelChannels, once: true}},
		{"jupyter_send", kernels, op{fn: s.opJupyterSend, ordered: true, once: true}},
		{"hold", true, op{fn: s.opHold, once: true}},
		{"release", true, op{fn: s.opRelease, once: true}},
		{"file_stat", files, op{fn: s.opFileStat, brief: true}},
		{"file_list", files, op{fn: s.opFileList, brief: true}},
		{"file_mkdir", files, op{fn: s.opFileMkdir, brief: true, once: true}},
		{"file_move", files, op{fn: s.opFileMove, brief: true, once: true}},
		{"file_remove", files, op{fn: s.opFileRemove, brief: true, once: true}},
		{"file_chmod", files, op{fn: s.opFileChmod, brief: true, once: true}},
		{"file_chown", files, op{fn: s.opFileChown, brief: true, once: true}},
		{"file_read", files, op{fn: s.opFileRead, brief: true, once: true}},
		{"file_write", files, op{fn: s.opFileWrite, brief: true, once: true}},
	}
}

func (s *Server) buildOps() map[string]op {
	ops := map[string]op{}
	for _, e := range s.opTable() {
		if !e.have {
			e.op = op{fn: unsupported(e.name), once: e.op.once}
		}
		ops[e.name] = e.op
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
// goroutine. Every request it takes is answered (respond or fail), but
// none once a resume's cut began: those are never run (section 11.13).
func (ss *Session) handleControl(msg []byte) (handedOff bool) {
	if !ss.takeRequest() {
		return
	}
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
	if req.HasInstance && req.Instance != ss.srv.instance() {
		ss.fail(req, ss.srv.goneInstance(req))
		return
	}
	if req.Op == "ack" {
		// ack has no response; its errors come back as error events.
		if _, err := o.fn(&call{ss: ss, req: req}); err != nil {
			ss.sendError(opError(req.Op, err), ackedStream(req))
		}
		ss.answered()
		return
	}
	if !req.HasID {
		ss.fail(req, wire.Errorf(wire.CodeBadRequest, "op %q needs an id", req.Op))
		return
	}
	c := &call{ss: ss, req: req}
	if o.once && req.OpID != "" {
		rec, first, err := ss.srv.outcomes.begin(ss.srv.instance(), req)
		if err != nil {
			ss.fail(req, err)
			return
		}
		if !first {
			ss.repeat(c, rec)
			return
		}
		c.outcome = rec
	}
	if !o.slow && !o.brief && !o.ordered {
		ss.respond(c, o)
		return
	}
	select {
	case ss.sem <- struct{}{}:
	default:
		ss.abandon(c)
		ss.fail(req, wire.Errorf(wire.CodeLimit, "more than %d slow requests in flight on this connection", maxInflightOps))
		return
	}
	if o.brief {
		defer func() { <-ss.sem }()
		return ss.runBrief(c, o)
	}
	run := func() {
		defer func() { <-ss.sem }()
		if ss.ctx.Err() != nil {
			// The connection ended before the request's turn: it never
			// runs, and a repeat of its op_id runs it.
			ss.abandon(c)
			ss.answered()
			return
		}
		ss.respond(c, o)
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

// orderedLoop runs ordered ops one at a time until the session ends; the
// ones still queued then are given up (run sees the session ended).
func (ss *Session) orderedLoop() {
	for {
		select {
		case run := <-ss.ordered:
			run()
		case <-ss.ctx.Done():
			for {
				select {
				case run := <-ss.ordered:
					run()
				default:
					return
				}
			}
		}
	}
}

// respond runs the op and answers the request.
func (ss *Session) respond(c *call, o op) {
	defer ss.answered()
	result, err := o.fn(c)
	if err != nil {
		e := opError(c.req.Op, err)
		if c.outcome != nil {
			ss.srv.outcomes.finish(c.outcome, nil, e, 0)
		}
		ss.sendControl(wire.ErrorResponse(c.req.ID, e))
		return
	}
	if c.outcome != nil {
		ss.srv.outcomes.finish(c.outcome, result, nil, c.made)
	}
	ss.sendResult(c, result)
}

// sendResult answers a request with its result.
func (ss *Session) sendResult(c *call, result any) {
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

// opError is err as op answers it. A bad_request names the op first, in
// one style for every op ("exec: cmd is empty", "hold: ttl_ms must be
// ..."), so a client that logs errors of many requests sees which one
// was wrong; a message that already starts with the op is kept.
func opError(op string, err error) *wire.Error {
	e := wire.AsError(err)
	if e.Code != wire.CodeBadRequest || strings.HasPrefix(e.Message, op+":") || strings.HasPrefix(e.Message, op+" ") {
		return e
	}
	return &wire.Error{Code: e.Code, Message: op + ": " + e.Message}
}

// fail answers a request that could not be dispatched.
func (ss *Session) fail(req wire.Request, err error) {
	defer ss.answered()
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
