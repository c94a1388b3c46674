package endpoint

import (
	"errors"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/traffic"
	"github.com/rayito/rayito-agent/internal/wire"
)

// Bounds of ttl_ms, from the traffic package's lease bounds.
var (
	minTTLMs = traffic.MinHoldTTL.Milliseconds()
	maxTTLMs = traffic.MaxHoldTTL.Milliseconds()
)

// opHold makes a lease, or renews the one named by `hold`. The parameter
// is `hold`, not `id`: a frame's `id` is the request's.
func (s *Server) opHold(c *call) (any, error) {
	var p struct {
		wire.Envelope
		Hold  *string `json:"hold"`
		TTLMs *int64  `json:"ttl_ms"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	if p.TTLMs == nil {
		return nil, wire.Errorf(wire.CodeBadRequest, "hold needs ttl_ms, from %d to %d", minTTLMs, maxTTLMs)
	}
	if *p.TTLMs < minTTLMs || *p.TTLMs > maxTTLMs {
		hint := ""
		if *p.TTLMs > maxTTLMs {
			hint = " (renew the hold to keep it longer)"
		}
		return nil, wire.Errorf(wire.CodeBadRequest, "ttl_ms must be from %d (1 s) to %d (1 h), got %d%s", minTTLMs, maxTTLMs, *p.TTLMs, hint)
	}
	ttl := time.Duration(*p.TTLMs) * time.Millisecond
	if p.Hold == nil {
		info, err := s.cfg.Traffic.Holds().Lease(ttl, traffic.Owner{Conn: c.ss, Client: c.ss.client})
		return info, holdError(err)
	}
	if *p.Hold == "" {
		return nil, wire.Errorf(wire.CodeBadRequest, "hold is empty: leave it out to make a new hold")
	}
	info, err := s.cfg.Traffic.Holds().Renew(*p.Hold, ttl)
	return info, holdError(err)
}

func (s *Server) opRelease(c *call) (any, error) {
	var p struct {
		wire.Envelope
		Hold string `json:"hold"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	if p.Hold == "" {
		return nil, wire.Errorf(wire.CodeBadRequest, "release needs a hold")
	}
	return nil, holdError(s.cfg.Traffic.Holds().Release(p.Hold))
}

// keepAwakeParam is the `keep_awake` parameter of the ops that create a
// stream a silent job may run in.
type keepAwakeParam struct {
	KeepAwake bool `json:"keep_awake"`
}

// keepAwake makes the stream that build creates hold the idle clock while
// it runs (`keep_awake: true`). The hold is claimed before the stream
// starts, so a refused hold starts nothing; the result names it.
func (s *Server) keepAwake(want bool, build func() (*stream.Stream, map[string]any, error)) func() (*stream.Stream, map[string]any, error) {
	if !want {
		return build
	}
	return func() (*stream.Stream, map[string]any, error) {
		r, err := s.cfg.Traffic.Holds().Reserve()
		if err != nil {
			return nil, nil, holdError(err)
		}
		st, result, err := build()
		if err != nil {
			r.Cancel()
			return nil, nil, err
		}
		result["hold"] = r.Bind(st.ID, st.Done()).Hold
		return st, result, nil
	}
}

// holdError gives the traffic package's hold errors their protocol codes.
func holdError(err error) error {
	code := wire.CodeInternal
	switch {
	case err == nil:
		return nil
	case errors.Is(err, traffic.ErrNoHold):
		code = wire.CodeNotFound
	case errors.Is(err, traffic.ErrTooManyHolds), errors.Is(err, traffic.ErrHoldPastMax):
		code = wire.CodeLimit
	case errors.Is(err, traffic.ErrHoldTTL), errors.Is(err, traffic.ErrNotALease):
		code = wire.CodeBadRequest
	}
	return wire.Errorf(code, "%v", err)
}
