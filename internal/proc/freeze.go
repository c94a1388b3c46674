package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// A pause freezes user work with cgroup v2's freezer (cgroup.freeze on the
// user cgroup, and on the hooks' with what hooks left running): every user process, and every process started while it
// is frozen (born into a frozen cgroup), stops without a signal it could
// see, as the whole VM stops a moment later. The agent keeps running.

// frozenPoll is how often FreezeUser reads cgroup.events while the kernel
// stops the tasks (one pass over them: well under a millisecond for a
// few hundred).
const frozenPoll = time.Millisecond

// ErrIsolationOff is what FreezeUser answers where user work has no
// cgroup of its own: nothing to freeze without stopping the agent too.
var ErrIsolationOff = errors.New("isolation is off")

// FreezeUser freezes the user cgroup and returns once the kernel reports
// every task in it stopped, or when ctx ends (the freeze then completes
// on its own: the cgroup stays frozen until ThawUser).
func (c *Cgroups) FreezeUser(ctx context.Context) error {
	if !c.On() {
		return fmt.Errorf("%w: %s", ErrIsolationOff, c.Off)
	}
	for _, d := range c.frozenWithUser() {
		if err := write(filepath.Join(d, "cgroup.freeze"), "1"); err != nil {
			return fmt.Errorf("freezing %s: %w", d, err)
		}
	}
	t := time.NewTicker(frozenPoll)
	defer t.Stop()
	for !c.UserFrozen() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not yet frozen: %w", c.user, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// ThawUser lets user work run again. Thawing a cgroup that is not frozen
// does nothing, so a new agent thaws at start what a crashed one left.
func (c *Cgroups) ThawUser() error {
	if !c.On() {
		return fmt.Errorf("%w: %s", ErrIsolationOff, c.Off)
	}
	for _, d := range c.frozenWithUser() {
		if err := write(filepath.Join(d, "cgroup.freeze"), "0"); err != nil {
			return fmt.Errorf("thawing %s: %w", d, err)
		}
	}
	return nil
}

// frozenWithUser is the cgroups a pause freezes: user work, and what the
// hooks left running.
func (c *Cgroups) frozenWithUser() []string { return []string{c.user, c.hooks} }

// UserFrozen reports whether the kernel says every task of the user
// cgroup, and of the hooks', is stopped (cgroup.events: frozen 1).
func (c *Cgroups) UserFrozen() bool {
	if !c.On() {
		return false
	}
	for _, d := range c.frozenWithUser() {
		if !cgroupFrozen(d) {
			return false
		}
	}
	return true
}

func cgroupFrozen(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "frozen 1" {
			return true
		}
	}
	return false
}

// UserWork freezes and thaws user work for a pause: the user cgroup, and
// the starts of new user processes, which wait for the thaw rather than
// fork a child that would be born frozen.
type UserWork struct {
	c *Cgroups
	r *Reaper

	mu   sync.Mutex
	held chan struct{} // closed at the thaw; nil while not frozen
}

// NewUserWork is the freezer of the user cgroup c, whose processes r
// starts.
func NewUserWork(c *Cgroups, r *Reaper) *UserWork { return &UserWork{c: c, r: r} }

// Freeze holds new starts and freezes the user cgroup (FreezeUser).
func (u *UserWork) Freeze(ctx context.Context) error {
	if !u.c.On() {
		return fmt.Errorf("%w: %s", ErrIsolationOff, u.c.Off)
	}
	u.mu.Lock()
	if u.held == nil {
		held := make(chan struct{})
		u.held = held
		// A pointer to a value of its own: a start that loaded it reads
		// this channel, never the field Thaw clears.
		u.r.held.Store(&held)
	}
	u.mu.Unlock()
	return u.c.FreezeUser(ctx)
}

// Thaw thaws the user cgroup, then lets held starts go on.
func (u *UserWork) Thaw() error {
	err := u.c.ThawUser()
	u.mu.Lock()
	if u.held != nil {
		u.r.held.Store(nil)
		close(u.held)
		u.held = nil
	}
	u.mu.Unlock()
	return err
}
