package endpoint

import (
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/watch"
	"github.com/rayito/rayito-agent/internal/wire"
)

// Watches watches directories; watch.Manager implements it.
type Watches interface {
	WatchWith(path string, o watch.Options) (*stream.Stream, error)
	Unwatch(id uint64) error
}

func (s *Server) opWatch(c *call) (any, error) {
	var p struct {
		wire.Envelope
		Path      string `json:"path"`
		Recursive bool   `json:"recursive"`
		HideTemp  bool   `json:"hide_temp"`
		Attach    *bool  `json:"attach"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	if p.Path == "" {
		return nil, wire.Errorf(wire.CodeBadRequest, "watch needs a path")
	}
	return s.create(c, p.Attach, func() (*stream.Stream, map[string]any, error) {
		st, err := s.cfg.Watches.WatchWith(p.Path, watch.Options{Recursive: p.Recursive, HideTemp: p.HideTemp})
		if err != nil {
			return nil, nil, err
		}
		return st, map[string]any{"stream": st.ID}, nil
	})
}

func (s *Server) opUnwatch(c *call) (any, error) {
	var p streamRef
	if err := c.params(&p); err != nil {
		return nil, err
	}
	if _, err := s.stream(p.Stream); err != nil {
		return nil, err
	}
	return nil, s.cfg.Watches.Unwatch(p.Stream)
}
