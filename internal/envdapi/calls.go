package envdapi

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// call is one request in flight, as the resume cut sees it. A handler
// that holds a stream registers what ending it takes (onCut); the cut runs
// that and bounds the call's writes, so a connection left half-dead by the
// snapshot cannot hold it. Calls without hooks (unary calls, file
// transfers) are left to finish.
type call struct {
	rc   *http.ResponseController
	done chan struct{} // closed when the handler has returned

	mu       sync.Mutex
	cutGen   uint64    // the generation that cut it; 0 while not cut
	deadline time.Time // for writes, once cut
	hooks    []func()
}

type callKey struct{}

// callFrom returns the request's call; every request through the guard
// has one.
func callFrom(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	if c == nil {
		// Handlers called without the guard (tests of a single handler)
		// still work; nothing will cut them.
		c = &call{done: make(chan struct{})}
	}
	return c
}

// onCut registers f to run when a resume cuts the call, at once if it
// already has.
func (c *call) onCut(f func()) {
	c.mu.Lock()
	if c.cutGen == 0 {
		c.hooks = append(c.hooks, f)
		c.mu.Unlock()
		return
	}
	deadline := c.deadline
	c.mu.Unlock()
	c.bound(deadline)
	f()
}

// cutBy returns the generation that cut the call, 0 if none did.
func (c *call) cutBy() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cutGen
}

// cutBound bounds a cut when the resume sequence gives no deadline.
const cutBound = 2 * time.Second

// Cut is the resume cut (surface.Cuttable): a call that holds a stream
// ends it with the Connect error unavailable, after the output written
// before the cut, and Cut returns when its handler has; its writes to a
// connection that stopped reading fail at ctx's deadline. Unary calls
// and file transfers are left to finish.
func (c *call) Cut(ctx context.Context, gen uint64) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(cutBound)
	}
	if !c.cut(gen, deadline) {
		return
	}
	select {
	case <-c.done:
	case <-ctx.Done():
	}
}

// cut marks the call cut by generation gen and, if it holds a stream,
// bounds its writes by deadline and runs its hooks; it reports whether it
// did. Only the first cut counts.
func (c *call) cut(gen uint64, deadline time.Time) bool {
	c.mu.Lock()
	if c.cutGen != 0 {
		c.mu.Unlock()
		return false
	}
	c.cutGen, c.deadline = gen, deadline
	hooks := c.hooks
	c.hooks = nil
	c.mu.Unlock()
	if len(hooks) == 0 {
		return false
	}
	c.bound(deadline)
	for _, f := range hooks {
		f()
	}
	return true
}

// bound makes writes fail after deadline.
func (c *call) bound(deadline time.Time) {
	if c.rc != nil {
		c.rc.SetWriteDeadline(deadline)
	}
}
