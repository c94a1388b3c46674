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
	// From maps channel names ("stdout", "stderr", "pty", "events") to
	// the cursor to start from; missing channels start at 0. A handle's
	// Cursors gives them.
	From map[string]uint64
	// Window is the unacknowledged bytes the agent may send per channel:
	// 0 picks the default (1 MiB), NoWindow none.
	Window int
	// Instance, when set, is the agent run the stream belongs to (the
	// Client.Instance it was made under): an agent that restarted since
	// refuses the attach (not_found) instead of matching Pid or Tag
	// against its new streams.
	Instance string
	// OnStdout and OnStderr work as in ExecOptions (Attach only).
	OnStdout, OnStderr func([]byte)
	// OnOutput works as in PTYOptions (AttachPTY only).
	OnOutput func([]byte)
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
	if o.Instance != "" {
		p.Instance = &o.Instance
	}
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
		if h.input != nil {
			h.input.begin(cn, res)
		}
		c.addHandle(h)
		return nil
	}})
	if err != nil {
		return nil, r, fmt.Errorf("client: attach: %w", err)
	}
	return h, r, nil
}

// created is the result of an op that creates a stream and attaches the
// connection to it.
type created struct {
	Stream uint64 `json:"stream"`
	Pid    int    `json:"pid"`
	Kernel string `json:"kernel"`
	Hold   string `json:"hold"`
	Path   string `json:"path"`   // file transfers
	Size   *int64 `json:"size"`   // file_read: bytes to come, nil for unknown
	Window int    `json:"window"` // file_write: input in flight at most
}

// create runs an op that creates a stream (exec, pty, watch, execute) and
// registers its handle before the stream's first frame is read. If the
// connection drops before the answer it is sent again with its op_id
// (opid.go): the agent answers with the stream the first made, if it
// made one, and attaches the new connection to it from the start.
func (c *Client) create(ctx context.Context, op string, params any, kind Kind, outs outputs) (*handle, created, error) {
	return c.createWith(ctx, op, params, kind, outs, nil)
}

// createWith is create with setup run on the new handle before it is
// registered (before any frame or reattach can reach it).
func (c *Client) createWith(ctx context.Context, op string, params any, kind Kind, outs outputs, setup func(*handle, created)) (*handle, created, error) {
	var h *handle
	var r created
	_, err := c.call(ctx, op, params, callOpts{once: true, onResult: func(cn *conn, res json.RawMessage, abandoned bool) error {
		if res == nil {
			return nil
		}
		var got created
		if err := json.Unmarshal(res, &got); err != nil || got.Stream == 0 {
			return protocolErrorf("%s result %s", op, res)
		}
		if abandoned {
			c.send.control("detach", got.Stream) // let the agent's grace run
			return nil
		}
		h, r = newHandle(c, cn, got.Stream, kind, defaultWindow, nil, outs), got
		if h.input != nil {
			h.input.begin(cn, res)
		}
		if setup != nil {
			setup(h, got)
		}
		c.addHandle(h)
		return nil
	}})
	if err != nil {
		return nil, created{}, fmt.Errorf("client: %s: %w", op, err)
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
