package envdapi

import (
	"context"
	"errors"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/rayito/rayito-agent/internal/envdapi/gen/process"
	"github.com/rayito/rayito-agent/internal/envdapi/gen/process/processconnect"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/ptymux"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// What a stream's Control may implement; each RPC asks for what it needs.
type (
	signaler interface {
		Signal(sig syscall.Signal, group bool) error
	}
	// inputWaiter takes all of an input or none of it, waiting for room
	// (proc's stdin, ptymux's terminal).
	inputWaiter interface {
		WriteInputWait(ctx context.Context, p []byte) error
	}
	inputWriter interface {
		WriteInput(p []byte) error
	}
	inputCloser interface {
		CloseInput() error
	}
	resizer interface {
		Resize(cols, rows uint16) error
	}
)

// processService is process.Process over proc and ptymux.
type processService struct {
	processconnect.UnimplementedProcessHandler
	s *Server
}

// Start runs a command, in a terminal when the request asks for one, and
// streams it from its first byte. The request's deadline is the process's
// lifetime.
func (p *processService) Start(ctx context.Context, req *connect.Request[process.StartRequest], out *connect.ServerStream[process.StartResponse]) error {
	m := req.Msg
	cfg := m.GetProcess()
	if cfg.GetCmd() == "" {
		return errorf(connect.CodeInvalidArgument, "process.cmd must name a program")
	}
	user, err := basicUser(req.Header())
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	var lifetime time.Duration
	if d, ok := ctx.Deadline(); ok {
		if lifetime = time.Until(d); lifetime <= 0 {
			return streamContextError(ctx)
		}
	}
	argv := append([]string{cfg.GetCmd()}, cfg.GetArgs()...)
	var st *stream.Stream
	if m.Pty != nil {
		size := m.Pty.GetSize()
		if err := ptymux.CheckSize(int(size.GetCols()), int(size.GetRows())); err != nil {
			return connectError(err)
		}
		st, err = p.s.cfg.PTYs.Start(ptymux.Options{
			Argv: argv, Cols: uint16(size.GetCols()), Rows: uint16(size.GetRows()),
			Env: cfg.GetEnvs(), Cwd: cfg.GetCwd(), User: user, Tag: m.GetTag(), Timeout: lifetime,
		})
	} else {
		st, err = p.s.cfg.Procs.Exec(proc.ExecOptions{
			Spec: proc.Spec{Argv: argv, Env: cfg.GetEnvs(), Cwd: cfg.GetCwd(), User: user},
			// Absent means an open stdin, as envd's older clients expect.
			Stdin: m.Stdin == nil || *m.Stdin, Tag: m.GetTag(), Timeout: lifetime,
		})
	}
	if err != nil {
		return connectError(err)
	}
	send := func(ev *process.ProcessEvent) error { return out.Send(&process.StartResponse{Event: ev}) }
	return p.s.pumpProcess(ctx, st, nil, send, keepaliveInterval(req.Header()), lifetime > 0)
}

// Connect streams a running process from the moment of connecting.
func (p *processService) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], out *connect.ServerStream[process.ConnectResponse]) error {
	st, err := p.s.find(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	send := func(ev *process.ProcessEvent) error { return out.Send(&process.ConnectResponse{Event: ev}) }
	return p.s.pumpProcess(ctx, st, st.Cursors(), send, keepaliveInterval(req.Header()), false)
}

// List returns the running commands and terminals, whichever surface
// started them.
func (p *processService) List(ctx context.Context, req *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	resp := &process.ListResponse{}
	for _, st := range p.s.cfg.Streams.List("") {
		if !isProcess(st) || st.Ended() != nil {
			continue
		}
		info := &process.ProcessInfo{Pid: uint32(st.Pid), Config: &process.ProcessConfig{}}
		if len(st.Argv) > 0 {
			info.Config.Cmd, info.Config.Args = st.Argv[0], st.Argv[1:]
		}
		if st.Tag != "" {
			info.Tag = &st.Tag
		}
		resp.Processes = append(resp.Processes, info)
	}
	return connect.NewResponse(resp), nil
}

// SendInput writes to a process's stdin or a terminal's input.
func (p *processService) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	st, err := p.s.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	// All or nothing: the answer means the bytes were queued for the
	// program, in order; an error means none were. It waits while the
	// program does not read, as long as the client waits.
	if err := writeInput(ctx, st, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

// StreamInput writes a client stream of input in order: a start naming the
// process, then data.
func (p *processService) StreamInput(ctx context.Context, in *connect.ClientStream[process.StreamInputRequest]) (*connect.Response[process.StreamInputResponse], error) {
	c := callFrom(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.onCut(func() {
		if c.rc != nil {
			c.rc.SetReadDeadline(time.Now()) // unblocks the read of the next message
		}
		cancel() // and a message waiting for room: none of it is written
	})
	var st *stream.Stream
	for in.Receive() {
		switch ev := in.Msg().GetEvent().(type) {
		case *process.StreamInputRequest_Start:
			if st != nil {
				return nil, errorf(connect.CodeInvalidArgument, "the input stream already named its process")
			}
			var err error
			if st, err = p.s.find(ev.Start.GetProcess()); err != nil {
				return nil, err
			}
		case *process.StreamInputRequest_Data:
			if st == nil {
				return nil, errorf(connect.CodeInvalidArgument, "the input stream's first message must be start, naming the process")
			}
			if err := writeInput(ctx, st, ev.Data.GetInput()); err != nil {
				if gen := c.cutBy(); gen != 0 {
					return nil, resumeError(gen, "send the rest of the input again, from the message that was waiting")
				}
				return nil, err
			}
		case *process.StreamInputRequest_Keepalive:
		default:
			return nil, errorf(connect.CodeInvalidArgument, "an input message needs start, data or keepalive")
		}
	}
	if gen := c.cutBy(); gen != 0 {
		return nil, resumeError(gen, "send the rest of the input again")
	}
	if err := in.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.StreamInputResponse{}), nil
}

// SendSignal signals a command's process group, or a terminal's program,
// whose exit hangs the terminal up for its jobs.
func (p *processService) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case process.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case process.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, errorf(connect.CodeInvalidArgument, "unsupported signal %v: send SIGNAL_SIGKILL or SIGNAL_SIGTERM", req.Msg.GetSignal())
	}
	st, err := p.s.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	sg, ok := st.Control.(signaler)
	if !ok {
		return nil, errorf(connect.CodeInvalidArgument, "process %d takes no signals", st.Pid)
	}
	// The SDK's kill() answers false on not_found: the process is gone.
	if st.Ended() != nil {
		return nil, errorf(connect.CodeNotFound, "process %d has exited", st.Pid)
	}
	if err := sg.Signal(sig, st.Kind == stream.KindProcess); err != nil {
		if isCode(err, wire.CodeConflict) {
			return nil, errorf(connect.CodeNotFound, "process %d has exited", st.Pid)
		}
		return nil, connectError(err)
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}

// CloseStdin closes a command's stdin once the input queued before is
// written.
func (p *processService) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	st, err := p.s.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	ic, ok := st.Control.(inputCloser)
	if !ok || st.Kind == stream.KindPTY {
		return nil, errorf(connect.CodeInvalidArgument, "process %d runs in a terminal, which has no end of input: send Ctrl-D (0x04) instead", st.Pid)
	}
	if err := ic.CloseInput(); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}

// Update resizes a terminal.
func (p *processService) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	st, err := p.s.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if req.Msg.Pty == nil {
		return connect.NewResponse(&process.UpdateResponse{}), nil // nothing to change
	}
	rz, ok := st.Control.(resizer)
	if !ok {
		return nil, errorf(connect.CodeInvalidArgument, "process %d does not run in a terminal", st.Pid)
	}
	size := req.Msg.Pty.GetSize()
	if err := ptymux.CheckSize(int(size.GetCols()), int(size.GetRows())); err != nil {
		return nil, connectError(err)
	}
	if err := rz.Resize(uint16(size.GetCols()), uint16(size.GetRows())); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&process.UpdateResponse{}), nil
}

// find returns the command or terminal a selector names: by pid (the
// newest stream with it, preferring a running one) or by tag.
func (s *Server) find(sel *process.ProcessSelector) (*stream.Stream, error) {
	var st *stream.Stream
	switch v := sel.GetSelector().(type) {
	case *process.ProcessSelector_Pid:
		if v.Pid == 0 {
			return nil, errorf(connect.CodeInvalidArgument, "pid must not be 0")
		}
		if st = s.cfg.Streams.Find(int(v.Pid), ""); st == nil || !isProcess(st) {
			return nil, errorf(connect.CodeNotFound, "process with pid %d not found", v.Pid)
		}
	case *process.ProcessSelector_Tag:
		if v.Tag == "" {
			return nil, errorf(connect.CodeInvalidArgument, "tag must not be empty")
		}
		if st = s.cfg.Streams.Find(0, v.Tag); st == nil || !isProcess(st) {
			return nil, errorf(connect.CodeNotFound, "process with tag %q not found", v.Tag)
		}
	default:
		return nil, errorf(connect.CodeInvalidArgument, "the process selector needs a pid or a tag")
	}
	return st, nil
}

// isProcess reports whether a stream is a command or a terminal.
func isProcess(st *stream.Stream) bool {
	return st.Kind == stream.KindProcess || st.Kind == stream.KindPTY
}

// writeInput queues input for a command's stdin or a terminal; either
// field reaches either kind, as both are the program's input.
func writeInput(ctx context.Context, st *stream.Stream, in *process.ProcessInput) error {
	var b []byte
	switch v := in.GetInput().(type) {
	case *process.ProcessInput_Stdin:
		b = v.Stdin
	case *process.ProcessInput_Pty:
		b = v.Pty
	default:
		return errorf(connect.CodeInvalidArgument, "input needs stdin or pty bytes")
	}
	if st.Ended() != nil {
		return errorf(connect.CodeNotFound, "process %d has exited", st.Pid)
	}
	if w, ok := st.Control.(inputWaiter); ok {
		if err := w.WriteInputWait(ctx, b); err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// The client's own timeout: it reads deadline_exceeded
				// whichever side notices first.
				return connect.NewError(connect.CodeDeadlineExceeded, errors.New(wire.AsError(err).Message))
			}
			return connectError(err)
		}
		return nil
	}
	w, ok := st.Control.(inputWriter)
	if !ok {
		return errorf(connect.CodeInvalidArgument, "process %d takes no input", st.Pid)
	}
	if err := w.WriteInput(b); err != nil {
		return connectError(err)
	}
	return nil
}

func isCode(err error, code wire.Code) bool {
	var we *wire.Error
	return errors.As(err, &we) && we.Code == code
}
