// Package traffic counts the bytes that cross the agent's websocket endpoint
// and decides when the sandbox is idle, so the host can suspend it.
//
// Only payload bytes of websocket messages count. Health probes, metrics
// scrapes and traffic polls never touch the counter: a host that watches a
// sandbox must not keep it awake by watching. Work that crosses no byte
// (a silent job, a client waiting on something outside) keeps the sandbox
// awake through holds (holds.go).
package traffic

import (
	"sync/atomic"
	"time"
)

// MinIdleSeconds is the smallest idle policy the agent accepts: anything
// shorter would suspend sandboxes between two keystrokes of a user.
const MinIdleSeconds = 60

// MaxIdleSeconds is the largest (30 days): a policy is a duration like
// every other, and no larger one means anything for a sandbox.
const MaxIdleSeconds = 30 * 24 * 60 * 60

// Counter is safe for concurrent use; the zero value is not: use NewCounter.
//
// Idle time is measured on the monotonic clock: the wall clock is stepped
// by the host after a resume (often after the resume reset the idle
// clock), and a step forward must not make a freshly resumed sandbox idle.
type Counter struct {
	in, out  atomic.Uint64
	last     atomic.Int64 // unix ns (wall) of the last counted byte, for reports
	lastMono atomic.Int64 // monotonic ns of the last counted byte, for idleness
	conns    atomic.Int64
	maxIdle  atomic.Int64 // seconds; 0 means no idle policy
	clock    Clock
	holds    *Holds
	// A BurstWatcher that found the endpoint quiet sleeps until the next
	// counted byte instead of ticking (asleep set); Touch wakes it.
	asleep atomic.Bool
	wake   chan struct{}
}

// Clock is where a Counter reads the time. Mono is a monotonic clock from
// any fixed origin; Now is the wall clock, only used in reports.
type Clock interface {
	Now() time.Time
	Mono() time.Duration
}

// systemClock reads the machine's clocks.
type systemClock struct{ origin time.Time }

func (s systemClock) Now() time.Time      { return time.Now() }
func (s systemClock) Mono() time.Duration { return time.Since(s.origin) }

// NewCounter starts counting; the last activity starts now.
func NewCounter() *Counter { return NewCounterWithClock(systemClock{origin: time.Now()}) }

// NewCounterWithClock is NewCounter on another clock (tests pass one they
// can move).
func NewCounterWithClock(clock Clock) *Counter {
	c := &Counter{clock: clock, holds: newHolds(clock), wake: make(chan struct{}, 1)}
	c.Touch()
	return c
}

// Holds are the counter's holds on the idle clock.
func (c *Counter) Holds() *Holds { return c.holds }

// Resumed restarts the idle clock after a VM resume and gives every lease
// its full ttl again, so clients cut by the resume have time to reconnect
// and renew.
func (c *Counter) Resumed() {
	c.Touch()
	c.holds.resumed()
}

// Close stops watching the streams that hold the idle clock.
func (c *Counter) Close() { c.holds.close() }

// In counts n bytes received; n <= 0 counts nothing.
func (c *Counter) In(n int) {
	if n <= 0 {
		return
	}
	c.in.Add(uint64(n))
	c.Touch()
}

// Out counts n bytes sent; n <= 0 counts nothing.
func (c *Counter) Out(n int) {
	if n <= 0 {
		return
	}
	c.out.Add(uint64(n))
	c.Touch()
}

// Touch resets the idle clock without counting bytes (a resume does this).
// Concurrent callers never move the idle clock back; the reported wall
// time follows the wall clock, steps included.
func (c *Counter) Touch() {
	storeMax(&c.lastMono, int64(c.clock.Mono()))
	c.last.Store(c.clock.Now().UnixNano())
	if c.asleep.Load() && c.asleep.CompareAndSwap(true, false) {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// storeMax raises v to x unless it is already higher.
func storeMax(v *atomic.Int64, x int64) {
	for old := v.Load(); x > old && !v.CompareAndSwap(old, x); old = v.Load() {
	}
}

// ConnOpened and ConnClosed track open websocket connections.
func (c *Counter) ConnOpened() { c.conns.Add(1) }
func (c *Counter) ConnClosed() { c.conns.Add(-1) }

// SetMaxIdle sets the idle policy in seconds; 0 removes it.
func (c *Counter) SetMaxIdle(seconds int64) error {
	if seconds != 0 && seconds < MinIdleSeconds {
		return ErrIdleTooShort
	}
	if seconds < 0 {
		return ErrIdleTooShort
	}
	if seconds > MaxIdleSeconds {
		return ErrIdleTooLong
	}
	c.maxIdle.Store(seconds)
	return nil
}

// Snapshot is the body of GET /v1/traffic.
type Snapshot struct {
	BytesIn            uint64      `json:"bytes_in"`
	BytesOut           uint64      `json:"bytes_out"`
	LastActivityUnixMs int64       `json:"last_activity_unix_ms"`
	IdleMs             int64       `json:"idle_ms"`
	Connections        int64       `json:"connections"`
	IdlePolicy         *IdlePolicy `json:"idle_policy,omitempty"`
	Idle               bool        `json:"idle"`
	Holds              []HoldInfo  `json:"holds"`
}

// IdlePolicy is the configured policy as reported.
type IdlePolicy struct {
	MaxIdleSeconds int64 `json:"max_idle_seconds"`
}

// Snapshot reads the counters. Idle time runs from the later of the last
// counted byte and the moment the last hold stopped counting; while a hold
// counts, it is zero.
func (c *Counter) Snapshot() Snapshot {
	now := c.clock.Mono()
	held, stopped, holds := c.holds.settle(now, c.clock.Now())
	s := Snapshot{
		BytesIn:            c.in.Load(),
		BytesOut:           c.out.Load(),
		LastActivityUnixMs: c.last.Load() / 1e6,
		Connections:        c.conns.Load(),
		Holds:              holds,
	}
	if !held {
		s.IdleMs = max(int64(now)-max(c.lastMono.Load(), int64(stopped)), 0) / 1e6
	}
	if m := c.maxIdle.Load(); m > 0 {
		s.IdlePolicy = &IdlePolicy{MaxIdleSeconds: m}
		s.Idle = s.IdleMs >= m*1000
	}
	return s
}
