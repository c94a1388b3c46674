package endpoint

import (
	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// Execer starts commands; proc.Manager implements it.
type Execer interface {
	Exec(o proc.ExecOptions) (*stream.Stream, error)
}

// shellArgv is how a `cmd` string runs: a login bash so the user's profile
// applies, or plain sh where bash is missing.
func shellArgv(cmd string) []string {
	if fileExists("/bin/bash") {
		return []string{"/bin/bash", "-l", "-c", cmd}
	}
	return []string{"/bin/sh", "-c", cmd}
}

func (s *Server) opExec(c *call) (any, error) {
	var p struct {
		wire.Envelope
		Argv      []string          `json:"argv"`
		Cmd       *string           `json:"cmd"`
		Env       map[string]string `json:"env"`
		Cwd       string            `json:"cwd"`
		User      string            `json:"user"`
		Stdin     bool              `json:"stdin"`
		Tag       string            `json:"tag"`
		TimeoutMs int64             `json:"timeout_ms"`
		Buffer    int               `json:"buffer"`
		Overflow  string            `json:"overflow"`
		GraceMs   *int64            `json:"grace_ms"`
		Attach    *bool             `json:"attach"`
		keepAwakeParam
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	o := proc.ExecOptions{
		Spec:  proc.Spec{Argv: p.Argv, Env: p.Env, Cwd: p.Cwd, User: p.User},
		Stdin: p.Stdin, Tag: p.Tag, Buffer: p.Buffer,
	}
	switch {
	case p.Cmd != nil && len(p.Argv) > 0:
		return nil, wire.Errorf(wire.CodeBadRequest, "give argv or cmd, not both")
	case p.Cmd != nil:
		if *p.Cmd == "" {
			return nil, wire.Errorf(wire.CodeBadRequest, "cmd is empty")
		}
		o.Argv = shellArgv(*p.Cmd)
	case len(p.Argv) == 0:
		return nil, wire.Errorf(wire.CodeBadRequest, "exec needs argv or cmd")
	}
	timeout, err := durationMs("timeout_ms", p.TimeoutMs)
	if err != nil {
		return nil, err
	}
	o.Timeout = timeout
	policy, err := overflowParam(p.Overflow, stream.Block)
	if err != nil {
		return nil, err
	}
	o.Overflow = policy
	if o.Grace, err = graceParam(p.GraceMs); err != nil {
		return nil, err
	}
	return s.create(c, p.Attach, s.keepAwake(p.KeepAwake, func() (*stream.Stream, map[string]any, error) {
		st, err := s.cfg.Procs.Exec(o)
		if err != nil {
			return nil, nil, err
		}
		return st, map[string]any{"stream": st.ID, "pid": st.Pid}, nil
	}))
}

// create runs build, which creates a stream and its result, and attaches
// the caller to the stream unless it asked not to. The attachment slot is
// claimed first: an op that answers an error has started nothing. On a
// connection that is closing (a resume cuts it) the request was read, so
// it runs, unattached: the client attaches after it reconnects.
func (s *Server) create(c *call, attach *bool, build func() (*stream.Stream, map[string]any, error)) (any, error) {
	attaching := attach == nil || *attach
	if attaching {
		if err := c.ss.reserve(); err == errClosing {
			attaching = false
		} else if err != nil {
			return nil, err
		}
	}
	st, result, err := build()
	if err != nil {
		if attaching {
			c.ss.unreserve()
		}
		return nil, err
	}
	c.made = st.ID
	if !attaching {
		return result, nil
	}
	start, err := c.ss.attach(st, nil, stream.DefaultWindow, true)
	if err != nil {
		// The connection started closing meanwhile. The stream runs
		// anyway: answer with it, so it can be attached after reconnecting.
		s.log.Debug("stream created on a closing connection", zap.Uint64("stream", st.ID), zap.Error(err))
		return result, nil
	}
	c.after = start
	if result != nil {
		c.ss.inputCursors(st, result)
	}
	return result, nil
}

func overflowParam(v string, def stream.Policy) (stream.Policy, error) {
	switch v {
	case "":
		return def, nil
	case "block":
		return stream.Block, nil
	case "drop":
		return stream.Drop, nil
	}
	return 0, wire.Errorf(wire.CodeBadRequest, "overflow must be \"block\" or \"drop\", got %q", v)
}
