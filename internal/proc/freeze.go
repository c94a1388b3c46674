package proc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
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

// FreezeUser freezes the user cgroup (and every cgroup user work made
// below it: cgroup v2 freezes a subtree) and returns once the kernel
// reports every task in it stopped, saying how many; or when ctx ends,
// with an error naming the processes not stopped yet (the freeze then
// completes on its own: the cgroup stays frozen until ThawUser).
func (c *Cgroups) FreezeUser(ctx context.Context) (string, error) {
	if !c.On() {
		return "", fmt.Errorf("%w: %s", ErrIsolationOff, c.Off)
	}
	for _, d := range c.frozenWithUser() {
		if err := write(filepath.Join(d, "cgroup.freeze"), "1"); err != nil {
			return "", fmt.Errorf("freezing %s: %w", d, err)
		}
	}
	t := time.NewTicker(frozenPoll)
	defer t.Stop()
	for !c.UserFrozen() {
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("not every user process stopped: %s: %w", c.running(true), ctx.Err())
		case <-t.C:
		}
	}
	n := 0
	for _, d := range c.frozenWithUser() {
		n += len(treeProcs(d))
	}
	return fmt.Sprintf("user work frozen: %d processes stopped", n), nil
}

// thawBound bounds the wait for the kernel to report user work thawed.
const thawBound = 2 * time.Second

// ThawUser lets user work run again, and returns once the kernel reports
// it running (frozen 0), or with an error naming what is still stopped
// after thawBound. A cgroup below user work that the user froze itself
// stays frozen: its own cgroup.freeze is left alone. Thawing a cgroup
// that is not frozen does nothing, so a new agent thaws at start what a
// crashed one left.
func (c *Cgroups) ThawUser() error {
	if !c.On() {
		return fmt.Errorf("%w: %s", ErrIsolationOff, c.Off)
	}
	for _, d := range c.frozenWithUser() {
		if err := write(filepath.Join(d, "cgroup.freeze"), "0"); err != nil {
			return fmt.Errorf("thawing %s: %w", d, err)
		}
	}
	deadline := time.Now().Add(thawBound)
	for _, d := range c.frozenWithUser() {
		for cgroupFrozen(d) {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s still frozen %s after its thaw: %s", d, thawBound, c.running(false))
			}
			time.Sleep(frozenPoll)
		}
	}
	return nil
}

// maxNamed bounds the processes an error names.
const maxNamed = 10

// running names the processes of the cgroups under user work whose
// freeze state is not yet what the pause wants (frozen, or thawed), the
// cgroups the user froze itself aside: "pid (comm) in cgroup", at most
// maxNamed.
func (c *Cgroups) running(wantFrozen bool) string {
	var named []string
	more := 0
	for _, root := range c.frozenWithUser() {
		filepath.WalkDir(root, func(dir string, e fs.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return nil
			}
			if !wantFrozen && selfFrozen(dir) && dir != root {
				return fs.SkipDir // the user's own freeze
			}
			if cgroupFrozen(dir) == wantFrozen {
				return nil
			}
			for _, pid := range cgroupProcs(dir) {
				if len(named) == maxNamed {
					more++
					continue
				}
				comm, _ := os.ReadFile(filepath.Join("/proc", pid, "comm"))
				named = append(named, fmt.Sprintf("%s (%s) in %s", pid, strings.TrimSpace(string(comm)), strings.TrimPrefix(dir, filepath.Dir(c.user)+"/")))
			}
			return nil
		})
	}
	if len(named) == 0 {
		return "no process named (the kernel has not settled)"
	}
	if more > 0 {
		named = append(named, fmt.Sprintf("and %d more", more))
	}
	return strings.Join(named, ", ")
}

// selfFrozen reports whether dir's own cgroup.freeze is 1.
func selfFrozen(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.freeze"))
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// cgroupProcs lists the pids of dir's own processes.
func cgroupProcs(dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// treeProcs lists the pids of dir's processes and of every cgroup below.
func treeProcs(dir string) []string {
	var all []string
	filepath.WalkDir(dir, func(d string, e fs.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			all = append(all, cgroupProcs(d)...)
		}
		return nil
	})
	return all
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
func (u *UserWork) Freeze(ctx context.Context) (string, error) {
	if !u.c.On() {
		return "", fmt.Errorf("%w: %s", ErrIsolationOff, u.c.Off)
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
