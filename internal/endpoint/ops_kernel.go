package endpoint

import (
	"context"
	"encoding/json"
	"time"

	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// Kernels runs Jupyter kernels; jupyter.Manager implements it.
type Kernels interface {
	Start(ctx context.Context, o jupyter.StartOptions) (*jupyter.Kernel, error)
	List() []jupyter.KernelInfo
	Execute(ctx context.Context, kernelID, code string, timeout time.Duration, allowStdin bool) (*stream.Stream, string, error)
	InputReply(streamID uint64, value string) error
	Interrupt(id string) error
	Restart(ctx context.Context, id string) error
	Shutdown(ctx context.Context, id string) error
	Channels(id string) (*stream.Stream, error)
}

// JupyterSender is the Control of a kernel_channels stream.
type JupyterSender interface {
	Send(ctx context.Context, msg json.RawMessage) error
}

func (s *Server) opKernelStart(c *call) (any, error) {
	var p struct {
		wire.Envelope
		Name string            `json:"name"`
		Cwd  string            `json:"cwd"`
		Env  map[string]string `json:"env"`
		User string            `json:"user"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	// The kernel manager bounds a start (--kernel-start-timeout): the one
	// owner of that bound.
	k, err := s.cfg.Kernels.Start(c.ss.ctx, jupyter.StartOptions{Name: p.Name, Cwd: p.Cwd, Env: p.Env, User: p.User})
	if err != nil {
		return nil, err
	}
	return map[string]any{"kernel": k.ID()}, nil
}

func (s *Server) opKernelList(c *call) (any, error) {
	var p struct{ wire.Envelope }
	if err := c.params(&p); err != nil {
		return nil, err
	}
	ks := s.cfg.Kernels.List()
	if ks == nil {
		ks = []jupyter.KernelInfo{}
	}
	return map[string]any{"kernels": ks}, nil
}

// kernelOp builds the ops that take only a kernel id.
func (s *Server) kernelOp(fn func(ctx context.Context, id string) error) func(*call) (any, error) {
	return func(c *call) (any, error) {
		var p struct {
			wire.Envelope
			Kernel string `json:"kernel"`
		}
		if err := c.params(&p); err != nil {
			return nil, err
		}
		if p.Kernel == "" {
			return nil, wire.Errorf(wire.CodeBadRequest, "%s needs a kernel", c.req.Op)
		}
		return nil, fn(c.ss.ctx, p.Kernel)
	}
}

func (s *Server) opExecute(c *call) (any, error) {
	var p struct {
		wire.Envelope
		Code       *string `json:"code"`
		Kernel     string  `json:"kernel"`
		TimeoutMs  int64   `json:"timeout_ms"`
		AllowStdin bool    `json:"allow_stdin"`
		Attach     *bool   `json:"attach"`
		keepAwakeParam
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	if p.Code == nil {
		return nil, wire.Errorf(wire.CodeBadRequest, "execute needs code")
	}
	timeout, err := durationMs("timeout_ms", p.TimeoutMs)
	if err != nil {
		return nil, err
	}
	return s.create(c, p.Attach, s.keepAwake(p.KeepAwake, func() (*stream.Stream, map[string]any, error) {
		st, kernel, err := s.cfg.Kernels.Execute(c.ss.ctx, p.Kernel, *p.Code, timeout, p.AllowStdin)
		if err != nil {
			return nil, nil, err
		}
		return st, map[string]any{"stream": st.ID, "kernel": kernel}, nil
	}))
}

func (s *Server) opInputReply(c *call) (any, error) {
	var p struct {
		wire.Envelope
		Stream uint64  `json:"stream"`
		Value  *string `json:"value"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	if p.Value == nil {
		return nil, wire.Errorf(wire.CodeBadRequest, "input_reply needs a value")
	}
	if _, err := s.stream(p.Stream); err != nil {
		return nil, err
	}
	return nil, s.cfg.Kernels.InputReply(p.Stream, *p.Value)
}

func (s *Server) opKernelChannels(c *call) (any, error) {
	var p struct {
		wire.Envelope
		Kernel string `json:"kernel"`
		Attach *bool  `json:"attach"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	if p.Kernel == "" {
		return nil, wire.Errorf(wire.CodeBadRequest, "kernel_channels needs a kernel")
	}
	return s.create(c, p.Attach, func() (*stream.Stream, map[string]any, error) {
		st, err := s.cfg.Kernels.Channels(p.Kernel)
		if err != nil {
			return nil, nil, err
		}
		return st, map[string]any{"stream": st.ID}, nil
	})
}

func (s *Server) opJupyterSend(c *call) (any, error) {
	var p struct {
		wire.Envelope
		Stream uint64          `json:"stream"`
		Msg    json.RawMessage `json:"msg"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	st, err := s.stream(p.Stream)
	if err != nil {
		return nil, err
	}
	js, ok := st.Control.(JupyterSender)
	if !ok {
		return nil, wire.Errorf(wire.CodeBadRequest, "stream %d (%s) is not a kernel_channels stream", st.ID, st.Kind)
	}
	if len(p.Msg) == 0 {
		return nil, wire.Errorf(wire.CodeBadRequest, "jupyter_send needs a msg")
	}
	return nil, js.Send(c.ss.ctx, p.Msg)
}
