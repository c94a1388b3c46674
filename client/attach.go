package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/rayito/rayito-agent/internal/wire"
)

// NoWindow asks the agent for no window at all (AttachOptions.Window):
// it sends as fast as it can and the client buffers without bound.
const NoWindow = -1

// AttachOptions name an existing stream (exactly one of Stream, Pid, Tag)
// and where to start reading it.
type AttachOptions struct {
	Stream uint64
	Pid    int
	Tag    string
	// From maps channel names ("stdout", "stderr") to the cursor to start
	// from; missing channels start at 0. Process.Cursors gives them.
	From map[string]uint64
	// Window is the unacknowledged bytes the agent may send per channel:
	// 0 picks the default (1 MiB), NoWindow none.
	Window int
	// OnStdout and OnStderr work as in ExecOptions.
	OnStdout, OnStderr func([]byte)
}

// attachResult is the result of the attach op.
type attachResult struct {
	Stream uint64 `json:"stream"`
	Kind   Kind   `json:"kind"`
	State  string `json:"state"`
	Pid    int    `json:"pid"`
}

// Attach attaches to a running or recently ended process and replays its
// output from the From cursors, then follows it live.
func (c *Client) Attach(ctx context.Context, o AttachOptions) (*Process, error) {
	h, r, err := c.attach(ctx, o, KindProcess, outputs{wire.ChanStdout: o.OnStdout, wire.ChanStderr: o.OnStderr})
	if err != nil {
		return nil, err
	}
	pid := r.Pid
	if pid == 0 {
		pid = o.Pid
	}
	if pid == 0 {
		pid = c.lookupPid(ctx, h.id)
	}
	return &Process{h: h, pid: pid}, nil
}

// attach attaches a handle of the wanted kind. A stream of another kind is
// detached again and reported as an error.
func (c *Client) attach(ctx context.Context, o AttachOptions, want Kind, outs outputs) (*handle, attachResult, error) {
	var p attachParams
	given := 0
	if o.Stream != 0 {
		p.Stream, given = &o.Stream, given+1
	}
	if o.Pid != 0 {
		p.Pid, given = &o.Pid, given+1
	}
	if o.Tag != "" {
		p.Tag, given = &o.Tag, given+1
	}
	if given != 1 {
		return nil, attachResult{}, errors.New("client: attach needs exactly one of Stream, Pid, Tag")
	}
	window := defaultWindow
	switch {
	case o.Window < 0:
		window = 0
		p.Window = &window
	case o.Window > 0:
		window = o.Window
		p.Window = &window
	}
	p.From = o.From
	var h *handle
	var r attachResult
	_, err := c.call(ctx, "attach", p, callOpts{retry: true, onResult: func(cn *conn, res json.RawMessage, abandoned bool) error {
		if res == nil {
			return nil
		}
		if err := json.Unmarshal(res, &r); err != nil || r.Stream == 0 {
			return protocolErrorf("attach result %s", res)
		}
		if abandoned || r.Kind != want {
			c.send.control("detach", r.Stream)
			if !abandoned {
				return fmt.Errorf("client: stream %d is a %s, not a %s", r.Stream, r.Kind, want)
			}
			return nil
		}
		h = newHandle(c, cn, r.Stream, r.Kind, window, o.From, outs)
		c.addHandle(h)
		return nil
	}})
	if err != nil {
		return nil, r, fmt.Errorf("client: attach: %w", err)
	}
	return h, r, nil
}

// lookupPid finds a stream's pid through list; 0 if that fails.
func (c *Client) lookupPid(ctx context.Context, id uint64) int {
	streams, err := c.List(ctx, "")
	if err != nil {
		return 0
	}
	for _, s := range streams {
		if s.Stream == id {
			return s.Pid
		}
	}
	return 0
}
