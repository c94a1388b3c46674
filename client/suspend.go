package client

// A host pauses a sandbox in two phases: it asks the agent to quiesce
// (POST /v1/pause), and the agent says "suspending" on every connection
// before the VM freezes. From then until a connection's hello, or a
// "resumed" event, says the sandbox runs again, the client is suspended:
// reconnecting spends none of ReconnectTimeout, so a handle read across a
// pause of any length returns its data once the sandbox is back.

// SandboxState is the sandbox's state as the client last heard it.
type SandboxState string

const (
	// StateRunning: the sandbox runs (or the client heard nothing else).
	StateRunning SandboxState = "running"
	// StateSuspended: the agent said the sandbox is being paused.
	StateSuspended SandboxState = "suspended"
)

// State is the sandbox's state as the client last heard it.
func (c *Client) State() SandboxState {
	if c.Suspended() {
		return StateSuspended
	}
	return StateRunning
}

// Suspended reports whether the agent said its sandbox is being paused
// and nothing since said it runs again.
func (c *Client) Suspended() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.suspended
}

// noteSuspendingLocked records what a hello or an event said; c.mu must
// be held. It returns what to run once c.mu is released: OnSuspend, on
// the change to suspended.
func (c *Client) noteSuspendingLocked(suspending bool, gen uint64) (after func()) {
	was := c.suspended
	c.suspended = suspending
	if suspending && !was && c.opts.OnSuspend != nil {
		return func() { c.opts.OnSuspend(gen) }
	}
	return func() {}
}
