package resume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/handover"
)

// An upgrade hands the running sandbox to a new agent binary in the same
// process (handover). Everything is checked before anything stops
// (PrepareUpgrade); then the sequence freezes user work, suspends every
// surface by the resume cut's rule, collects each participant's state and
// execs the new binary. The new agent adopts the state before it serves
// (AdoptUpgrade), then thaws user work and answers the host's call on its
// own connection, carried across (FinishUpgrade). A step that fails
// undoes the ones before it: the old agent serves on, user work thawed.

// Bounds of an upgrade's deadline: from the call to the exec.
const (
	DefaultUpgradeDeadline = 10 * time.Second
	MinUpgradeDeadline     = 200 * time.Millisecond
	MaxUpgradeDeadline     = time.Minute
	// probeBound bounds the new binary's handover-check.
	probeBound = 5 * time.Second
	// upgradesKept bounds the memory of upgrade_id answers.
	upgradesKept = 16
)

// Errors an upgrade's callers branch on.
var (
	// ErrBadUpgrade: the request or its binary is wrong (400).
	ErrBadUpgrade = errors.New("bad upgrade")
	// ErrUpgradeBusy: a pause, a resume or another upgrade is in place
	// (409).
	ErrUpgradeBusy = errors.New("the lifecycle is busy")
	// ErrCannotCarry: the agent holds what this version cannot hand over
	// yet (409); nothing stopped.
	ErrCannotCarry = errors.New("the agent holds what it cannot hand over")
)

// Handover is what an upgrade asks of the rest of the agent.
type Handover interface {
	// Carriable is nil if everything the agent holds can be handed over,
	// or an error naming what cannot.
	Carriable() error
	// Suspend stops every surface: requests read are answered, none is
	// read after, clients connecting wait (surface.Server.Suspend).
	Suspend(ctx context.Context) error
	// Unsuspend serves again after a failed handover.
	Unsuspend()
	// Collect puts every participant's state and descriptors in s.
	Collect(s *handover.State) error
}

// UpgradeRequest is the host's upgrade.
type UpgradeRequest struct {
	ID string
	// Binary is the new agent, open; it is what is checked and what runs
	// (by its descriptor: a path changed after the check changes nothing).
	Binary   *os.File
	SHA256   string
	Deadline time.Duration
}

// UpgradeAnswer is what an upgrade did.
type UpgradeAnswer struct {
	UpgradeID string `json:"upgrade_id,omitempty"`
	// State is "upgraded", or "failed" (the previous agent serves on).
	State       string  `json:"state"`
	FromVersion string  `json:"from_version"`
	ToVersion   string  `json:"to_version"`
	Format      int     `json:"format"`
	Steps       []Step  `json:"steps"`
	AtUnixMs    int64   `json:"at_unix_ms"`
	DurationMs  float64 `json:"duration_ms"`
	// FrozenMs is how long user work was frozen.
	FrozenMs float64 `json:"frozen_ms"`
	Error    string  `json:"error,omitempty"`
}

// Upgrade is an upgrade checked and ready to run (PrepareUpgrade). It
// holds the lifecycle (no pause or resume runs) until Run.
type Upgrade struct {
	m       *Manager
	req     UpgradeRequest
	probe   handover.Probe
	format  int
	started time.Time
	checkMs float64
}

// PrepareUpgrade checks req before anything stops: the deadline, the
// binary (handover.CheckFile, then its handover-check), the formats both
// read, and what the agent holds. An upgrade_id already answered gets
// that answer (repeat).
func (m *Manager) PrepareUpgrade(ctx context.Context, req UpgradeRequest) (u *Upgrade, repeat *UpgradeAnswer, err error) {
	if req.ID != "" {
		m.mu.Lock()
		a, ok := m.upgradeAnswers[req.ID]
		m.mu.Unlock()
		if ok {
			return nil, &a, nil
		}
	}
	switch {
	case m.o.Handover == nil:
		return nil, nil, fmt.Errorf("%w: this agent was built without a handover", ErrBadUpgrade)
	case req.Binary == nil:
		return nil, nil, fmt.Errorf("%w: no binary", ErrBadUpgrade)
	case req.Deadline == 0:
		req.Deadline = DefaultUpgradeDeadline
	case req.Deadline < MinUpgradeDeadline || req.Deadline > MaxUpgradeDeadline:
		return nil, nil, fmt.Errorf("%w: deadline_ms must be %d to %d", ErrBadUpgrade, MinUpgradeDeadline.Milliseconds(), MaxUpgradeDeadline.Milliseconds())
	}
	if m.Paused() != nil {
		return nil, nil, fmt.Errorf("%w: a pause is in place; resume or abort it first", ErrUpgradeBusy)
	}
	if !m.seq.TryLock() {
		return nil, nil, fmt.Errorf("%w: a pause, a resume or another upgrade is running; try again", ErrUpgradeBusy)
	}
	defer func() {
		if err != nil {
			m.seq.Unlock()
		}
	}()
	start := time.Now()
	if err := handover.CheckFile(req.Binary, req.SHA256); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrBadUpgrade, err)
	}
	pctx, cancel := context.WithTimeout(ctx, min(req.Deadline, probeBound))
	defer cancel()
	p, err := handover.ProbeBinary(pctx, fdPath(req.Binary))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrBadUpgrade, err)
	}
	format, err := handover.Choose(p.Reads)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrBadUpgrade, p.Version, err)
	}
	if err := m.o.Handover.Carriable(); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrCannotCarry, err)
	}
	return &Upgrade{m: m, req: req, probe: p, format: format, started: start, checkMs: ms(time.Since(start))}, nil, nil
}

// fdPath names f's descriptor as a path exec can run.
func fdPath(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }

// Names of the upgrade's steps.
const (
	stepCheck   = "check"
	stepSuspend = "suspend"
	stepCollect = "collect"
	stepExec    = "exec"
	stepAdopt   = "adopt"
)

// Run runs the upgrade: on success it does not return (the new agent
// answers on caller, the host's connection, carried across). On failure
// it undoes what it did and returns the answer; the lifecycle is free
// again either way.
func (u *Upgrade) Run(caller *os.File) UpgradeAnswer {
	m := u.m
	defer m.seq.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), u.req.Deadline-time.Since(u.started))
	defer cancel()
	seq := &steps{ctx: ctx}
	seq.list = append(seq.list, Step{Step: stepCheck, Status: StepDone, Ms: u.checkMs,
		Detail: fmt.Sprintf("%s, reads handover formats %v: writing %d", u.probe.Version, u.probe.Reads, u.format)})
	var frozenAt time.Time
	var frozen, suspended bool
	ok := func(s Step) bool { return s.Status == StepDone || s.Status == StepSkipped }
	run := func() error {
		if s := seq.run(stepFreeze, func() (string, bool, error) {
			return m.freezeUserWork(ctx, func() { frozenAt, frozen = time.Now(), true })
		}); !ok(s) {
			return errors.New(s.Detail)
		}
		if s := seq.run(stepSuspend, func() (string, bool, error) {
			suspended = true
			return "every surface answered what it read", false, m.o.Handover.Suspend(ctx)
		}); !ok(s) {
			return errors.New(s.Detail)
		}
		st := handover.New(m.o.Version)
		// Reached only when the exec did not happen: the duplicates go.
		defer st.Close()
		if s := seq.run(stepCollect, func() (string, bool, error) {
			if err := m.o.Handover.Collect(st); err != nil {
				return "", false, err
			}
			if caller != nil {
				st.PutFile(fileUpgradeCaller, caller)
			}
			return fmt.Sprintf("%d descriptors", len(st.Files())), false, nil
		}); !ok(s) {
			return errors.New(s.Detail)
		}
		s := seq.run(stepExec, func() (string, bool, error) {
			// The record goes last, with every step before the exec in it.
			steps := seq.snapshot()
			steps[len(steps)-1] = Step{Step: stepExec, Status: StepRunning}
			rec := upgradeRecord{ID: u.req.ID, From: m.o.Version, To: u.probe.Version, Format: u.format, Steps: steps,
				StartedUnixNs: u.started.UnixNano(), ExecUnixNs: time.Now().UnixNano()}
			if frozen {
				rec.FrozenUnixNs = frozenAt.UnixNano()
			}
			if err := st.Put(sectionLifecycle, m.carry(rec)); err != nil {
				return "", false, err
			}
			if ctx.Err() != nil {
				return "", false, fmt.Errorf("past the deadline")
			}
			return "", false, st.Exec(fdPath(u.req.Binary), os.Args, os.Environ())
		})
		return errors.New(s.Detail)
	}
	err := run()
	// Only a failure comes back here: undo, newest first, whatever the
	// deadline (user work must not stay frozen because time ran out).
	seq.unbound()
	if suspended {
		m.o.Handover.Unsuspend()
	}
	if frozen {
		seq.run(stepThaw, m.thawUserWork)
	}
	a := UpgradeAnswer{UpgradeID: u.req.ID, State: "failed", FromVersion: m.o.Version, ToVersion: u.probe.Version, Format: u.format,
		Steps: seq.snapshot(), AtUnixMs: u.started.UnixMilli(), DurationMs: ms(time.Since(u.started)), Error: err.Error()}
	if frozen {
		a.FrozenMs = ms(time.Since(frozenAt))
	}
	m.rememberUpgrade(a, false)
	m.log.Warn("upgrade failed: this agent serves on", zap.String("to", u.probe.Version), zap.Error(err), zap.Any("steps", a.Steps))
	return a
}

// rememberUpgrade records a as the last upgrade (counted if done) and
// under its id.
func (m *Manager) rememberUpgrade(a UpgradeAnswer, done bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if done {
		m.upgrades++
	}
	m.lastUpgrade = &a
	if a.UpgradeID == "" {
		return
	}
	if _, ok := m.upgradeAnswers[a.UpgradeID]; !ok {
		m.upgradeOrder = append(m.upgradeOrder, a.UpgradeID)
		if len(m.upgradeOrder) > upgradesKept {
			delete(m.upgradeAnswers, m.upgradeOrder[0])
			m.upgradeOrder = m.upgradeOrder[1:]
		}
	}
	m.upgradeAnswers[a.UpgradeID] = a
}

// Cancel lets go of an upgrade that will not run: the lifecycle is free
// again.
func (u *Upgrade) Cancel() { u.m.seq.Unlock() }
