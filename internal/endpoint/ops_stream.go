package endpoint

import (
	"errors"
	"fmt"
	"math"
	"syscall"

	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// What a stream's Control may implement; the endpoint asks for each.
type (
	// Signaler delivers a signal to a stream's process or process group.
	Signaler interface {
		Signal(sig syscall.Signal, group bool) error
	}
	// InputWriter takes IN frames; it must not block.
	InputWriter interface {
		WriteInput(p []byte) error
	}
	// InputCloser ends a stream's input (close_stdin).
	InputCloser interface {
		CloseInput() error
	}
	// Resizer changes a terminal's window size.
	Resizer interface {
		Resize(cols, rows uint16) error
	}
)

type streamRef struct {
	wire.Envelope
	Stream uint64 `json:"stream"`
}

// stream finds the stream a request names.
func (s *Server) stream(id uint64) (*stream.Stream, error) {
	if id == 0 {
		return nil, wire.Errorf(wire.CodeBadRequest, "missing stream")
	}
	st := s.cfg.Streams.Get(id)
	if st == nil {
		if !stream.Possible(id) {
			return nil, wire.Errorf(wire.CodeNotFound, "no stream %d: no run of the agent makes such an id (ids are a prefix from 1 to 2^21-1 times 2^32, plus a number from 1)", id)
		}
		if !s.cfg.Streams.Owns(id) {
			return nil, wire.Errorf(wire.CodeNotFound, "no stream %d: the agent restarted since it made that stream (this is instance %s); the stream and its output are gone", id, s.instance())
		}
		if s.cfg.Streams.IsExpired(id) {
			l := s.cfg.Streams.Limits()
			return nil, wire.Errorf(wire.CodeNotFound, "stream %d expired: the agent keeps ended streams for %v, at most %d of them and %s of their output",
				id, l.KeepEnded, l.MaxEnded, stream.FormatBytes(l.MaxEndedBytes))
		}
		return nil, wire.Errorf(wire.CodeNotFound, "no stream %d", id)
	}
	return st, nil
}

// goneInstance refuses a request made for another run of the agent (its
// `instance` is not this one's): a client that knew the agent before a
// restart must not read a new stream's output, nor have a request it
// sent before run again.
func (s *Server) goneInstance(req wire.Request) error {
	e := wire.Errorf(wire.CodeNotFound, "instance %q is gone: the agent restarted or took a new identity (this is instance %s); its streams and their output are gone", req.Instance, s.instance())
	if req.OpID != "" {
		e.Message += fmt.Sprintf("; whether the request with op_id %q ran there is unknown, and it is not run here", req.OpID)
	}
	return e
}

// streamResult is what ops that create or attach a stream answer.
func streamResult(st *stream.Stream) map[string]any {
	r := map[string]any{"stream": st.ID, "kind": st.Kind, "state": "running"}
	if e := st.Ended(); e != nil {
		r["state"] = "ended"
		end := e.Fields()
		end["cursors"] = st.Cursors()
		r["end"] = end
	}
	return r
}

func (s *Server) opAttach(c *call) (any, error) {
	var p struct {
		wire.Envelope
		Stream *uint64           `json:"stream"`
		Pid    *int              `json:"pid"`
		Tag    *string           `json:"tag"`
		From   map[string]uint64 `json:"from"`
		Window *int              `json:"window"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	given := 0
	for _, set := range []bool{p.Stream != nil, p.Pid != nil, p.Tag != nil} {
		if set {
			given++
		}
	}
	if given != 1 {
		return nil, wire.Errorf(wire.CodeBadRequest, "attach needs exactly one of stream, pid, tag")
	}
	var st *stream.Stream
	switch {
	case p.Stream != nil:
		var err error
		if st, err = s.stream(*p.Stream); err != nil {
			return nil, err
		}
	case p.Pid != nil:
		if st = s.cfg.Streams.Find(*p.Pid, ""); st == nil || *p.Pid == 0 {
			return nil, wire.Errorf(wire.CodeNotFound, "no stream for pid %d", *p.Pid)
		}
	default:
		if st = s.cfg.Streams.Find(0, *p.Tag); st == nil || *p.Tag == "" {
			return nil, wire.Errorf(wire.CodeNotFound, "no stream tagged %q", *p.Tag)
		}
	}
	window, err := windowParam(p.Window)
	if err != nil {
		return nil, err
	}
	start, err := c.ss.attach(st, p.From, window, false)
	if err != nil {
		return nil, err
	}
	c.after = start
	r := streamResult(st)
	r["instance"] = s.instance()
	c.ss.takeOver(st, r)
	c.ss.inputCursors(st, r)
	return r, nil
}

func windowParam(w *int) (int, error) {
	if w == nil {
		return stream.DefaultWindow, nil
	}
	if *w < 0 {
		return 0, wire.Errorf(wire.CodeBadRequest, "window must be 0 (no limit) or positive")
	}
	return *w, nil
}

func (s *Server) opDetach(c *call) (any, error) {
	var p streamRef
	if err := c.params(&p); err != nil {
		return nil, err
	}
	if _, err := s.stream(p.Stream); err != nil {
		return nil, err
	}
	a := c.ss.attached(p.Stream)
	if a == nil {
		return nil, wire.Errorf(wire.CodeNotFound, "stream %d is not attached on this connection", p.Stream)
	}
	if ab, ok := a.st.Control.(Abandoner); ok {
		ab.Abandon(c.ss)
	}
	// After the response: the pump may queue the end at once, and the
	// client must see {} first.
	c.after = func() { a.att.Cut(stream.End{Reason: stream.ReasonClosed, Message: "detached"}) }
	return nil, nil
}

func (s *Server) opAck(c *call) (any, error) {
	var p struct {
		wire.Envelope
		Stream  uint64            `json:"stream"`
		Cursors map[string]uint64 `json:"cursors"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	a := c.ss.attached(p.Stream)
	if a == nil {
		// The attachment may have just ended: a late ack is harmless, and
		// still tells the stream what the client has, so an ended
		// stream's buffers can go at once.
		st, err := s.stream(p.Stream)
		if err != nil {
			return nil, err
		}
		st.Acknowledge(p.Cursors)
		return nil, nil
	}
	if err := a.att.Ack(p.Cursors); err != nil {
		return nil, wire.Errorf(wire.CodeBadRequest, "ack of stream %d: %v", p.Stream, err)
	}
	return nil, nil
}

// listEntry is one stream in a `list` result.
type listEntry struct {
	Stream  uint64            `json:"stream"`
	Kind    stream.Kind       `json:"kind"`
	Pid     int               `json:"pid,omitempty"`
	Tag     string            `json:"tag,omitempty"`
	Argv    []string          `json:"argv,omitempty"`
	State   string            `json:"state"`
	Cursors map[string]uint64 `json:"cursors"`
	End     map[string]any    `json:"end,omitempty"`
}

func (s *Server) opList(c *call) (any, error) {
	var p struct {
		wire.Envelope
		Kind string `json:"kind"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	out := []listEntry{}
	for _, st := range s.cfg.Streams.List(stream.Kind(p.Kind)) {
		e := listEntry{Stream: st.ID, Kind: st.Kind, Pid: st.Pid, Tag: st.Tag, Argv: st.Argv, State: "running", Cursors: st.Cursors()}
		if end := st.Ended(); end != nil {
			e.State, e.End = "ended", end.Fields()
		}
		out = append(out, e)
	}
	return map[string]any{"streams": out, "instance": s.instance()}, nil
}

func (s *Server) opSignal(c *call) (any, error) {
	var p struct {
		wire.Envelope
		Stream uint64 `json:"stream"`
		Signal string `json:"signal"`
		Group  *bool  `json:"group"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	st, err := s.stream(p.Stream)
	if err != nil {
		return nil, err
	}
	sig, err := proc.ParseSignal(p.Signal)
	if err != nil {
		return nil, err
	}
	sg, ok := st.Control.(Signaler)
	if !ok {
		return nil, wire.Errorf(wire.CodeBadRequest, "stream %d (%s) takes no signals", st.ID, st.Kind)
	}
	if st.Ended() != nil {
		return nil, wire.Errorf(wire.CodeConflict, "stream %d has ended", st.ID)
	}
	return nil, sg.Signal(sig, p.Group == nil || *p.Group)
}

func (s *Server) opCloseStdin(c *call) (any, error) {
	var p struct {
		streamRef
		// Offset, from clients that number their input: close once that
		// much input was received (input_offsets.go).
		Offset *uint64 `json:"offset"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	st, err := s.stream(p.Stream)
	if err != nil {
		return nil, err
	}
	if p.Offset != nil {
		if *p.Offset > math.MaxInt64 {
			return nil, wire.Errorf(wire.CodeBadRequest, "offset is out of range: %d (at most %d)", *p.Offset, int64(math.MaxInt64))
		}
		oi, ok := st.Control.(OffsetInputCloser)
		if !ok {
			return nil, wire.Errorf(wire.CodeBadRequest, "stream %d (%s) has no stdin", st.ID, st.Kind)
		}
		return nil, oi.CloseInputAt(*p.Offset)
	}
	ic, ok := st.Control.(InputCloser)
	if !ok {
		return nil, wire.Errorf(wire.CodeBadRequest, "stream %d (%s) has no stdin", st.ID, st.Kind)
	}
	return nil, ic.CloseInput()
}

func (s *Server) opResize(c *call) (any, error) {
	var p struct {
		wire.Envelope
		Stream uint64 `json:"stream"`
		Cols   int    `json:"cols"`
		Rows   int    `json:"rows"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	st, err := s.stream(p.Stream)
	if err != nil {
		return nil, err
	}
	rz, ok := st.Control.(Resizer)
	if !ok {
		return nil, wire.Errorf(wire.CodeBadRequest, "stream %d (%s) is not a terminal", st.ID, st.Kind)
	}
	cols, err := dimension("cols", &p.Cols)
	if err != nil {
		return nil, err
	}
	rows, err := dimension("rows", &p.Rows)
	if err != nil {
		return nil, err
	}
	return nil, rz.Resize(cols, rows)
}

// handleData takes an IN frame: input for a stream's process or terminal.
// It reports a payload over the protocol's limit, which closes the
// connection instead of answering.
func (ss *Session) handleData(msg []byte) (tooBig bool) {
	d, err := wire.DecodeData(msg)
	if errors.Is(err, wire.ErrTooLarge) {
		return true
	}
	if err != nil {
		ss.sendError(wire.Errorf(wire.CodeBadRequest, "%v", err), 0)
		return false
	}
	if d.Type != wire.In && d.Type != wire.InAt {
		ss.sendError(wire.Errorf(wire.CodeBadRequest, "clients send IN frames only"), d.Stream)
		return false
	}
	st, err := ss.srv.stream(d.Stream)
	if err != nil {
		ss.sendError(wire.AsError(err), d.Stream)
		return false
	}
	if d.Type == wire.InAt {
		ss.inputAt(st, d.Offset, d.Payload)
		return false
	}
	if in, ok := st.Control.(SessionInput); ok {
		ss.sessionInput(st, in, d.Payload)
		return false
	}
	w, ok := st.Control.(InputWriter)
	if !ok {
		ss.sendError(wire.Errorf(wire.CodeBadRequest, "stream %d (%s) takes no input", st.ID, st.Kind), st.ID)
		return false
	}
	if err := w.WriteInput(d.Payload); err != nil {
		ss.sendError(wire.AsError(err), st.ID)
	}
	return false
}
