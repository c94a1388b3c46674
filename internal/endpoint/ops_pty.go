package endpoint

import (
	"github.com/rayito/rayito-agent/internal/ptymux"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// PTYs starts terminals; ptymux.Manager implements it.
type PTYs interface {
	Start(o ptymux.Options) (*stream.Stream, error)
}

func (s *Server) opPTY(c *call) (any, error) {
	var p struct {
		wire.Envelope
		Argv   []string          `json:"argv"`
		Cols   *int              `json:"cols"`
		Rows   *int              `json:"rows"`
		Env    map[string]string `json:"env"`
		Cwd    string            `json:"cwd"`
		User   string            `json:"user"`
		Tag    string            `json:"tag"`
		Buffer int               `json:"buffer"`
		Attach *bool             `json:"attach"`
		keepAwakeParam
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	o := ptymux.Options{Argv: p.Argv, Env: p.Env, Cwd: p.Cwd, User: p.User, Tag: p.Tag, Buffer: p.Buffer}
	var err error
	if o.Cols, err = dimension("cols", p.Cols); err != nil {
		return nil, err
	}
	if o.Rows, err = dimension("rows", p.Rows); err != nil {
		return nil, err
	}
	if p.Buffer < 0 || p.Buffer > stream.MaxByteCapacity {
		return nil, wire.Errorf(wire.CodeBadRequest, "buffer must be between 0 and %d bytes", stream.MaxByteCapacity)
	}
	return s.create(c, p.Attach, s.keepAwake(p.KeepAwake, func() (*stream.Stream, map[string]any, error) {
		st, err := s.cfg.PTYs.Start(o)
		if err != nil {
			return nil, nil, err
		}
		return st, map[string]any{"stream": st.ID, "pid": st.Pid}, nil
	}))
}

// maxDimension bounds terminal sizes: beyond it a client bug, not a screen.
const maxDimension = 10000

// dimension checks an optional terminal size; absent is 0 (the default).
func dimension(name string, v *int) (uint16, error) {
	if v == nil {
		return 0, nil
	}
	if *v < 1 || *v > maxDimension {
		return 0, wire.Errorf(wire.CodeBadRequest, "%s must be between 1 and %d, got %d", name, maxDimension, *v)
	}
	return uint16(*v), nil
}
