// Package traffictest gives tests a settable clock for traffic.Counter, so
// idle policies of minutes and holds of hours are tested without waiting.
package traffictest

import (
	"sync"
	"time"
)

// Clock is a wall clock and a monotonic clock that move only when told.
// It implements traffic.Clock. Safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	wall    time.Time
	elapsed time.Duration
}

// NewClock starts at a fixed wall time, an hour after the monotonic
// origin (so no reading is ever zero by accident).
func NewClock() *Clock {
	return &Clock{wall: time.Unix(1_800_000_000, 0), elapsed: time.Hour}
}

// Now is the wall clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall
}

// Mono is the monotonic clock.
func (c *Clock) Mono() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.elapsed
}

// Advance lets time pass: both clocks move.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.wall = c.wall.Add(d)
	c.elapsed += d
	c.mu.Unlock()
}

// Step sets the wall clock by d, as a host does after a resume; no time
// passes on the monotonic clock.
func (c *Clock) Step(d time.Duration) {
	c.mu.Lock()
	c.wall = c.wall.Add(d)
	c.mu.Unlock()
}
