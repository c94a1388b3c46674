package traffic

import "time"

// Carried is what a Counter hands over to a new agent binary: the byte
// counts and the idle clock go on where they were, so neither the host's
// traffic reading nor its idle timer notices the handover.
type Carried struct {
	BytesIn    uint64 `json:"bytes_in"`
	BytesOut   uint64 `json:"bytes_out"`
	LastUnixNs int64  `json:"last_unix_ns"`
	// IdleNs is how long before the handover the last byte was counted.
	IdleNs  int64 `json:"idle_ns"`
	MaxIdle int64 `json:"max_idle_seconds"`
	// AtUnixNs is when it was carried: the handover's own time counts
	// as idle.
	AtUnixNs int64 `json:"at_unix_ns"`
}

// Carry is the counter's state for a handover.
func (c *Counter) Carry() Carried {
	return Carried{BytesIn: c.in.Load(), BytesOut: c.out.Load(), LastUnixNs: c.last.Load(),
		IdleNs: max(int64(c.clock.Mono())-c.lastMono.Load(), 0), MaxIdle: c.maxIdle.Load(), AtUnixNs: c.clock.Now().UnixNano()}
}

// Adopt takes over what another agent's counter carried; the time the
// handover took counts as idle.
func (c *Counter) Adopt(k Carried) {
	handover := max(c.clock.Now().Sub(time.Unix(0, k.AtUnixNs)), 0)
	c.in.Store(k.BytesIn)
	c.out.Store(k.BytesOut)
	c.last.Store(k.LastUnixNs)
	c.lastMono.Store(int64(c.clock.Mono()) - k.IdleNs - int64(handover))
	if c.maxIdle.Load() == 0 {
		c.maxIdle.Store(k.MaxIdle)
	}
}
