package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Reconnect backoff: the first retry is immediate (after a resume the
// agent is back at once), then 50 ms doubling up to 2 s.
const (
	backoffFirst = 50 * time.Millisecond
	backoffMax   = 2 * time.Second
	// dialTimeout bounds one attempt, so a half-dead route is retried.
	dialTimeout = 10 * time.Second
)

// supervise reconnects each time the connection drops, until Close or
// until reconnecting fails for good.
func (c *Client) supervise() {
	defer c.wg.Done()
	for {
		select {
		case <-c.stop:
			return
		case <-c.lost:
		}
		if err := c.reconnect(); err != nil {
			if !errors.Is(err, ErrClosed) {
				c.log.Warn("giving up reconnecting", zap.Error(err))
				c.failEverything(err)
			}
			return
		}
	}
}

// reconnect dials with backoff, then reattaches every live handle.
func (c *Client) reconnect() error {
	deadline := time.Now().Add(c.opts.ReconnectTimeout)
	var delay time.Duration
	for {
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-c.stop:
				t.Stop()
				return ErrClosed
			case <-t.C:
			}
		}
		// A paused sandbox answers nothing: waiting for it spends none
		// of the budget, however long the pause.
		suspended := c.Suspended()
		attempt := time.Now().Add(dialTimeout)
		if attempt.After(deadline) && !suspended {
			attempt = deadline
		}
		ctx, cancel := context.WithDeadline(c.life, attempt)
		cn, err := c.dial(ctx)
		cancel()
		if err == nil {
			c.log.Debug("reconnected", zap.Uint64("generation", cn.gen))
			c.mu.Lock()
			prev, live := c.instance, c.liveHandlesLocked()
			c.mu.Unlock()
			if !c.install(cn) {
				return ErrClosed
			}
			if cn.inst != prev {
				// Another run of the agent: attaching its streams by
				// the old ids would read strangers' output.
				err := fmt.Errorf("%w (instance %s, now %s)", ErrAgentRestarted, prev, cn.inst)
				c.log.Warn("the agent restarted: failing live handles", zap.Int("handles", len(live)))
				for _, h := range live {
					h.finish(nil, err)
				}
			} else if err := c.reattachAll(cn); err != nil {
				// The new connection dropped too; its reader has queued
				// another round.
				return nil
			}
			if c.opts.OnReconnect != nil {
				c.opts.OnReconnect(cn.gen)
			}
			return nil
		}
		switch {
		case c.life.Err() != nil:
			return ErrClosed
		case errors.Is(err, ErrUnauthorized):
			return fmt.Errorf("%w: %w", ErrConnectionLost, err)
		case suspended:
			deadline = time.Now().Add(c.opts.ReconnectTimeout)
		case !time.Now().Before(deadline):
			return fmt.Errorf("%w: no connection for %v: %w", ErrConnectionLost, c.opts.ReconnectTimeout, err)
		}
		c.log.Debug("reconnect failed", zap.Error(err))
		delay = min(max(2*delay, backoffFirst), backoffMax)
	}
}

// reattachAll attaches every live handle on cn from what it received, so
// its reader sees one unbroken stream. It stops if cn drops.
func (c *Client) reattachAll(cn *conn) error {
	c.mu.Lock()
	hs := c.liveHandlesLocked()
	c.mu.Unlock()
	for _, h := range hs {
		if err := c.reattach(cn, h); err != nil {
			return err
		}
	}
	return nil
}

// reattach attaches h on cn; it returns an error only if cn is gone. A
// stream the agent no longer has fails its handle.
func (c *Client) reattach(cn *conn, h *handle) error {
	h.mu.Lock()
	attached, detaching := h.conn == cn, h.detaching
	h.mu.Unlock()
	switch {
	case h.finished.Load() || attached:
		return nil
	case detaching:
		h.finish(nil, ErrDetached)
		return nil
	}
	h.reattached()
	p := attachParams{Stream: &h.id, From: h.cursors(false)}
	if cn.inst != "" {
		// The run the stream belongs to, which the agent checks as well.
		p.Instance = &cn.inst
	}
	if h.window != defaultWindow {
		p.Window = &h.window
	}
	_, err := c.call(c.life, "attach", p, callOpts{on: cn, onResult: func(rc *conn, res json.RawMessage, abandoned bool) error {
		if res != nil && !abandoned {
			h.mu.Lock()
			h.conn = rc
			h.mu.Unlock()
			if h.onAttach != nil {
				h.onAttach(res)
			}
			if h.input != nil {
				h.input.reattached(rc, res)
			}
		}
		return nil
	}})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrConnectionLost), c.life.Err() != nil:
		return ErrConnectionLost
	}
	h.finish(nil, fmt.Errorf("client: reattaching stream %d: %w", h.id, err))
	return nil
}

// attachParams are the params of the attach op.
type attachParams struct {
	Stream *uint64           `json:"stream,omitempty"`
	Pid    *int              `json:"pid,omitempty"`
	Tag    *string           `json:"tag,omitempty"`
	From   map[string]uint64 `json:"from,omitempty"`
	Window *int              `json:"window,omitempty"`
	// Instance is the agent run the stream belongs to, when known.
	Instance *string `json:"instance,omitempty"`
}

// liveHandlesLocked lists the handles; c.mu must be held.
func (c *Client) liveHandlesLocked() []*handle {
	hs := make([]*handle, 0, len(c.handles))
	for _, h := range c.handles {
		hs = append(hs, h)
	}
	return hs
}
