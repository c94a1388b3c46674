package client

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// HoldInfo is one hold as the agent reports it (Traffic.Holds, Hold.Info).
type HoldInfo struct {
	Hold   string `json:"hold"`
	Stream uint64 `json:"stream,omitempty"` // the stream of a keep_awake hold
	// CreatedUnixMs and ExpiresUnixMs are wall times in ms: when the hold
	// was made, and when it stops counting unless renewed (a lease's end
	// or the agent's maximum hold time, whichever is first).
	CreatedUnixMs int64 `json:"created_unix_ms"`
	ExpiresUnixMs int64 `json:"expires_unix_ms"`
	TTLMs         int64 `json:"ttl_ms,omitempty"` // leases only
	// Counting is false once the hold is past the agent's maximum hold
	// time: it no longer keeps the sandbox awake.
	Counting bool `json:"counting"`
}

// Hold is a lease on the sandbox's idle clock: while it counts, the agent
// does not report the sandbox idle, however long no byte crosses the
// endpoint. Use it while a client waits on something outside the sandbox.
// It ends at its ttl unless renewed (renew well before, say every ttl/3),
// at Release, or once it has counted for the agent's maximum hold time.
//
// The hold belongs to the agent, not to this client's connection: it
// survives reconnects and resumes (a resume gives it its full ttl again).
// Safe for concurrent use.
type Hold struct {
	c  *Client
	id string

	mu   sync.Mutex
	info HoldInfo
}

// Hold makes a lease for ttl, from 1 s to 1 h. Like Exec it is never
// re-sent: if the connection drops before the answer, a hold may have
// been made; it ends at its ttl.
func (c *Client) Hold(ctx context.Context, ttl time.Duration) (*Hold, error) {
	info, err := c.hold(ctx, "", ttl, false)
	if err != nil {
		return nil, err
	}
	return &Hold{c: c, id: info.Hold, info: info}, nil
}

// ID is the hold's id, as listed in Traffic.Holds.
func (h *Hold) ID() string { return h.id }

// Info is the hold as the agent last reported it.
func (h *Hold) Info() HoldInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.info
}

// Expires is when the hold stops counting unless renewed.
func (h *Hold) Expires() time.Time { return time.UnixMilli(h.Info().ExpiresUnixMs) }

// Renew makes the hold count for ttl from now. It fails with a not_found
// *Error once the hold ended (its ttl ran out, or it was released), and a
// limit one once it counted for the agent's maximum hold time.
func (h *Hold) Renew(ctx context.Context, ttl time.Duration) error {
	info, err := h.c.hold(ctx, h.id, ttl, true)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.info = info
	h.mu.Unlock()
	return nil
}

// Release ends the hold now.
func (h *Hold) Release(ctx context.Context) error { return h.c.ReleaseHold(ctx, h.id) }

// ReleaseHold ends the hold with that id now: a lease, or the hold of a
// keep_awake stream (which runs on).
func (c *Client) ReleaseHold(ctx context.Context, id string) error {
	if _, err := c.call(ctx, "release", struct {
		Hold string `json:"hold"`
	}{id}, callOpts{once: true}); err != nil {
		return fmt.Errorf("client: release %s: %w", id, err)
	}
	return nil
}

// hold makes a lease (id "") or renews one; renewals are safe to repeat
// on a new connection.
func (c *Client) hold(ctx context.Context, id string, ttl time.Duration, retry bool) (HoldInfo, error) {
	p := struct {
		Hold  string `json:"hold,omitempty"`
		TTLMs int64  `json:"ttl_ms"`
	}{id, ceilMs(ttl)}
	res, err := c.call(ctx, "hold", p, callOpts{retry: retry, once: true})
	if err != nil {
		if id == "" {
			return HoldInfo{}, fmt.Errorf("client: hold: %w", err)
		}
		return HoldInfo{}, fmt.Errorf("client: hold %s: %w", id, err)
	}
	var info HoldInfo
	if err := json.Unmarshal(res, &info); err != nil || info.Hold == "" {
		return HoldInfo{}, protocolErrorf("hold result %s", res)
	}
	return info, nil
}
