package resume

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
)

// A pause comes in two phases. Before the host freezes the VM it calls
// Pause, which quiesces the sandbox: it tells the native clients, freezes
// user work, syncs (and with ModeFilesystem freezes) the filesystems and
// may shrink memory. The resume sequence thaws late: the clock step and
// the CRNG re-key run while user work is still frozen, so no user process
// runs with the old clock or the old CRNG. A pause that is never followed
// by a resume ends with Abort, or by itself after ThawAfter of the guest's
// own time, which stands still while the VM is frozen.

// PauseMode says what the host is about to save.
type PauseMode string

const (
	// ModeMemory: a memory snapshot follows (the default).
	ModeMemory PauseMode = "memory"
	// ModeFilesystem: only the disk is saved, so the filesystems are
	// frozen too (FIFREEZE): the disk is then as after a clean unmount.
	ModeFilesystem PauseMode = "filesystem"
)

// Shrink says how much memory a pause gives back before the snapshot.
type Shrink string

const (
	ShrinkNone  Shrink = "none"
	ShrinkCache Shrink = "cache"
	ShrinkAll   Shrink = "all"
)

// Bounds and defaults of a pause's times.
const (
	DefaultPauseDeadline = time.Second
	MaxPauseDeadline     = time.Minute
	DefaultThawAfter     = 30 * time.Second
	MinThawAfter         = time.Second
	MaxThawAfter         = 24 * time.Hour
)

// Errors a pause's callers branch on.
var (
	// ErrPauseConflict: a pause is in place with other parameters.
	ErrPauseConflict = errors.New("a pause with other parameters is in place")
	// ErrNotPaused: there is no pause to abort.
	ErrNotPaused = errors.New("no pause is in place")
	// errResumeFirst stops a quiesce that a resume or abort overtook.
	errResumeFirst = errors.New("a resume or abort came first")
)

// PauseRequest is the host's pause.
type PauseRequest struct {
	Mode      PauseMode
	Shrink    Shrink
	Deadline  time.Duration
	ThawAfter time.Duration
}

// Names of the steps.
const (
	stepNotify   = "notify"
	stepHooks    = "hooks"
	stepFreeze   = "freeze"
	stepSync     = "sync"
	stepFSFreeze = "fsfreeze"
	stepShrink   = "shrink"
	stepFSThaw   = "fsthaw"
	stepThaw     = "thaw"
)

// PauseAnswer is what a pause did.
type PauseAnswer struct {
	State              string    `json:"state"` // "pausing" until every step is over, then "paused"
	Generation         uint64    `json:"generation"`
	Mode               PauseMode `json:"mode"`
	Shrink             Shrink    `json:"shrink"`
	Steps              []Step    `json:"steps"`
	MemAvailableBefore int64     `json:"mem_available_before"`
	MemAvailableAfter  int64     `json:"mem_available_after"`
	DurationMs         float64   `json:"duration_ms"`
	DeadlinePassed     bool      `json:"deadline_passed"`
	ThawAfterMs        int64     `json:"thaw_after_ms"`
	AtUnixMs           int64     `json:"at_unix_ms"`
	// Hooks are the pre-pause hooks' results (hooks.go).
	Hooks []HookResult `json:"hooks,omitempty"`
}

// PauseEnd is how the last pause ended, for health.
type PauseEnd struct {
	AtUnixMs int64     `json:"at_unix_ms"`
	Mode     PauseMode `json:"mode"`
	Shrink   Shrink    `json:"shrink"`
	// Ended is "resume", "abort" or "auto_thaw".
	Ended    string `json:"ended"`
	PausedMs int64  `json:"paused_ms"`
	Thaw     []Step `json:"thaw"`
}

// Clients is what a pause needs of the native endpoint.
type Clients interface {
	// Suspending tells every connection that the sandbox is about to be
	// paused at generation gen, and new connections too until Resumed;
	// it returns once each connection has been handed the event, or ctx
	// ends, with the number told.
	Suspending(ctx context.Context, gen uint64) int
	// Resumed tells every connection the sandbox runs again at gen
	// (aborted: the pause was called off and the generation is unchanged).
	Resumed(gen uint64, aborted bool)
}

// UserWork freezes and thaws user work; proc.UserWork implements it.
type UserWork interface {
	// Freeze returns once user work is stopped, saying how much, or
	// with an error naming what did not stop by ctx's end.
	Freeze(ctx context.Context) (string, error)
	Thaw() error
}

// freezeUserWork is the freeze step of a pause or an upgrade: started
// runs before the freeze begins (what froze must be thawed even if the
// freeze does not finish).
func (m *Manager) freezeUserWork(ctx context.Context, started func()) (string, bool, error) {
	if m.o.UserWork == nil {
		return "user work is not isolated: " + m.o.UserWorkOff, true, nil
	}
	started()
	d, err := m.o.UserWork.Freeze(ctx)
	return d, false, err
}

// thawUserWork is the thaw step of every sequence that froze user work.
func (m *Manager) thawUserWork() (string, bool, error) {
	if m.o.UserWork == nil {
		return "", false, fmt.Errorf("user work was frozen, and this agent cannot thaw it: %s", m.o.UserWorkOff)
	}
	if err := m.o.UserWork.Thaw(); err != nil {
		return "", false, err
	}
	return "user work thawed", false, nil
}

// pause is one pause, from the host's call to its thaw.
type pause struct {
	req     PauseRequest
	started time.Time
	ctx     context.Context // cancelled by a resume or abort: stop quiescing
	base    context.Context // the same without the deadline: the hooks'
	cancel  func()
	release context.CancelFunc // frees the deadline's timer
	done    chan struct{}      // closed when the quiesce is over
	// before is the guest detectors' dedup state when the pause came:
	// a detection noticed before the pause is judged against it
	// (takePauseFor). Guarded by the Manager's pmu.
	before dedupState

	steps steps // the quiesce's, ending with ctx

	mu     sync.Mutex
	answer PauseAnswer // but its Steps: steps has them
	frozen []frozenFS
	user   bool // user work was frozen
	timer  *time.Timer
}

// pausedMs is how long the pause has lasted by the wall clock, which
// counts the time the VM was frozen once the resume set the clock (the
// monotonic clock never does).
func (p *pause) pausedMs() int64 {
	return time.Now().Round(0).Sub(p.started.Round(0)).Milliseconds()
}

func (p *pause) snapshot() PauseAnswer {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.answer
	a.Steps = p.steps.snapshot()
	a.Hooks = append([]HookResult(nil), a.Hooks...)
	return a
}

// Pause quiesces the sandbox for a pause (the steps in the package doc)
// and answers by the request's deadline with what is done. A pause while
// one is in place with the same parameters (all four: a retry) shares it
// and gets its answer; with others it is ErrPauseConflict, since the one
// in place keeps its own.
func (m *Manager) Pause(ctx context.Context, req PauseRequest) (PauseAnswer, error) {
	m.pmu.Lock()
	p := m.pause
	if p != nil && p.req != req {
		m.pmu.Unlock()
		return PauseAnswer{}, fmt.Errorf("%w: mode %s, shrink %s, deadline_ms %d, thaw_after_ms %d; asked %s, %s, %d, %d; abort it first", ErrPauseConflict,
			p.req.Mode, p.req.Shrink, p.req.Deadline.Milliseconds(), p.req.ThawAfter.Milliseconds(),
			req.Mode, req.Shrink, req.Deadline.Milliseconds(), req.ThawAfter.Milliseconds())
	}
	if p == nil {
		base, cancelCause := context.WithCancelCause(context.Background())
		pctx, release := context.WithDeadline(base, time.Now().Add(req.Deadline))
		p = &pause{req: req, started: time.Now(), ctx: pctx, base: base, release: release, done: make(chan struct{}),
			cancel: func() { cancelCause(errResumeFirst); release() }}
		p.steps.ctx = pctx
		p.answer = PauseAnswer{State: "pausing", Mode: req.Mode, Shrink: req.Shrink, ThawAfterMs: req.ThawAfter.Milliseconds(), AtUnixMs: p.started.UnixMilli()}
		m.mu.Lock()
		p.before = m.dedup.clone()
		m.mu.Unlock()
		m.pause = p
		go m.quiesce(p)
	}
	m.pmu.Unlock()
	// p.ctx ends at the deadline (answer with what is done), or once the
	// quiesce is over or overtaken (answer with all of it).
	select {
	case <-p.ctx.Done():
		if !errors.Is(context.Cause(p.ctx), context.DeadlineExceeded) {
			<-p.done
		}
	case <-ctx.Done():
	}
	a := p.snapshot()
	if a.State != "paused" {
		a.DeadlinePassed = true
		a.DurationMs = ms(time.Since(p.started))
	}
	return a, nil
}

// quiesce runs the steps of p, one sequence at a time with resumes.
func (m *Manager) quiesce(p *pause) {
	defer close(p.done)
	defer p.release()
	m.seq.Lock()
	defer m.seq.Unlock()
	m.mu.Lock()
	gen := m.gen
	// Whatever reports a restore after a pause reports a new one: no
	// guest detection before it, nor its window, can claim it.
	m.dedup = dedupState{reported: map[Source]bool{SourceHost: true}}
	m.mu.Unlock()
	p.mu.Lock()
	p.answer.Generation = gen
	p.answer.MemAvailableBefore = memAvailable()
	p.mu.Unlock()
	p.steps.run(stepNotify, func() (string, bool, error) {
		if m.o.Clients == nil {
			return "no native endpoint", true, nil
		}
		n := m.o.Clients.Suspending(p.ctx, gen)
		return fmt.Sprintf("%d connections told", n), false, nil
	})
	if m.o.Hooks != nil {
		// Before the freeze, while the programs they talk to still run;
		// bounded by their own timeout, not the pause's deadline.
		p.steps.run(stepHooks, func() (string, bool, error) {
			rs := m.o.Hooks.Run(p.base, HookPrePause, HookEnv{Generation: gen, SandboxID: m.sandboxID()}, func(rs []HookResult) {
				// The answer shows which hook runs, if the deadline comes first.
				p.mu.Lock()
				p.answer.Hooks = rs
				p.mu.Unlock()
			})
			p.mu.Lock()
			p.answer.Hooks = rs
			p.mu.Unlock()
			return hooksDetail(rs), false, nil
		})
	}
	p.steps.run(stepFreeze, func() (string, bool, error) {
		return m.freezeUserWork(p.ctx, func() {
			p.mu.Lock()
			p.user = true
			p.mu.Unlock()
		})
	})
	fss, fsErr := writableFilesystems()
	p.steps.run(stepSync, func() (string, bool, error) {
		if fsErr != nil {
			return "", false, fsErr
		}
		d, err := syncFilesystems(fss)
		return d, false, err
	})
	if p.req.Mode == ModeFilesystem {
		p.steps.run(stepFSFreeze, func() (string, bool, error) {
			if !m.o.WholeVM {
				return "the filesystems are shared with the machine: " + m.o.WholeVMWhy, true, nil
			}
			frozen, d, err := freezeFilesystems(fss)
			p.mu.Lock()
			p.frozen = frozen
			p.mu.Unlock()
			return d, false, err
		})
	}
	if p.req.Shrink != ShrinkNone {
		p.steps.run(stepShrink, func() (string, bool, error) {
			d, err := shrinkMemory(p.req.Shrink, m.o.WholeVM, m.o.WholeVMWhy)
			return d, false, err
		})
	}
	p.mu.Lock()
	p.answer.MemAvailableAfter = memAvailable()
	p.answer.DurationMs = ms(time.Since(p.started))
	p.answer.State = "paused"
	p.answer.DeadlinePassed = errors.Is(context.Cause(p.ctx), context.DeadlineExceeded)
	p.mu.Unlock()
	a := p.snapshot()
	m.pmu.Lock()
	if m.pause == p {
		p.timer = time.AfterFunc(p.req.ThawAfter, func() { m.autoThaw(p) })
	}
	m.pmu.Unlock()
	m.writeLifecycle()
	m.log.Info("paused", zap.Uint64("generation", gen), zap.String("mode", string(p.req.Mode)), zap.String("shrink", string(p.req.Shrink)),
		zap.Any("steps", a.Steps), zap.Int64("mem_available_before", a.MemAvailableBefore), zap.Int64("mem_available_after", a.MemAvailableAfter))
}

// takePauseFor is takePause(nil) for report r, except for a guest
// detection noticed before the pause in place began that belongs to the
// resume handled before it: a clock jump from the last restore, noticed
// a tick after the host had reported that restore, whose report ran late
// (a loaded guest) while the host's next pause was already quiescing.
// That detection is no restore after the pause; it must neither end the
// pause nor count as a new resume, so it is stale and the pause stays.
// A detection before the pause that no handled resume claims is a
// restore nobody reported: it ends the pause and runs, as before.
func (m *Manager) takePauseFor(r Report) (p *pause, stale bool) {
	return m.takePauseIf(func(p *pause) bool {
		if r.Source == SourceHost || r.NoticedAt.IsZero() || !r.NoticedAt.Before(p.started) {
			return true
		}
		if p.before.claims(r.Source, r.NoticedAt) {
			p.before.reported[r.Source] = true
			stale = true
			return false
		}
		return true
	}), stale
}

// takePause ends the pause in place, if any (only want, when not nil):
// it stops the quiesce and waits for it, and returns the pause to thaw.
func (m *Manager) takePause(want *pause) *pause {
	return m.takePauseIf(func(p *pause) bool { return want == nil || p == want })
}

// takePauseIf is takePause for the pause in place if take, called with
// the Manager's pmu held, says so.
func (m *Manager) takePauseIf(take func(*pause) bool) *pause {
	m.pmu.Lock()
	p := m.pause
	if p == nil || !take(p) {
		m.pmu.Unlock()
		return nil
	}
	m.pause = nil
	if p.timer != nil {
		p.timer.Stop()
	}
	m.pmu.Unlock()
	p.cancel()
	<-p.done
	return p
}

// thaw undoes what p froze, filesystems first (a thawed process may
// write at once), and records how the pause ended.
func (m *Manager) thaw(p *pause, ended string) []Step {
	var thaw steps
	p.mu.Lock()
	frozen, user := p.frozen, p.user
	p.frozen = nil
	p.mu.Unlock()
	if len(frozen) > 0 {
		thaw.run(stepFSThaw, func() (string, bool, error) {
			d, err := thawFilesystems(frozen)
			return d, false, err
		})
	}
	if user {
		thaw.run(stepThaw, m.thawUserWork)
	}
	steps := thaw.snapshot()
	end := &PauseEnd{AtUnixMs: p.started.UnixMilli(), Mode: p.req.Mode, Shrink: p.req.Shrink, Ended: ended,
		PausedMs: p.pausedMs(), Thaw: steps}
	m.mu.Lock()
	m.lastPause = end
	m.mu.Unlock()
	return steps
}

// AbortAnswer is what an abort did.
type AbortAnswer struct {
	State      string `json:"state"` // "running"
	Generation uint64 `json:"generation"`
	PausedMs   int64  `json:"paused_ms"`
	Thaw       []Step `json:"thaw"`
}

// Abort calls off the pause in place: user work and the filesystems thaw,
// clients are told, and the generation stays (no restore happened).
// Without a pause it is ErrNotPaused.
func (m *Manager) Abort() (AbortAnswer, error) {
	p := m.takePause(nil)
	if p == nil {
		return AbortAnswer{}, ErrNotPaused
	}
	return m.abort(p, "abort"), nil
}

func (m *Manager) abort(p *pause, ended string) AbortAnswer {
	paused := p.pausedMs()
	steps, gen := m.finishPause(p, ended, true)
	m.log.Info("pause called off", zap.String("by", ended), zap.Uint64("generation", gen), zap.Any("thaw", steps))
	return AbortAnswer{State: "running", Generation: gen, PausedMs: paused, Thaw: steps}
}

// finishPause thaws p outside a resume sequence (an abort, or a restore
// whose sequence already ran): clients hear the sandbox runs again at the
// current generation, and the lifecycle file says so.
func (m *Manager) finishPause(p *pause, ended string, aborted bool) ([]Step, uint64) {
	steps := m.thaw(p, ended)
	gen := m.Generation()
	if m.o.Clients != nil {
		m.o.Clients.Resumed(gen, aborted)
	}
	m.writeLifecycle()
	return steps, gen
}

// autoThaw ends a pause that no resume followed within its ThawAfter.
// The timer counts the guest's monotonic time, which stands still while
// the VM is frozen, so a real pause, however long, rarely runs it down;
// should it, the guest's restore detectors are asked first: if they see
// a restore, its resume sequence takes the pause and thaws it late.
func (m *Manager) autoThaw(p *pause) {
	if m.o.Detect != nil && m.o.Detect() {
		return // a restore: its resume takes the pause
	}
	if p = m.takePause(p); p == nil {
		return
	}
	m.log.Warn("no resume came within thaw_after: thawing the sandbox", zap.Duration("thaw_after", p.req.ThawAfter))
	m.abort(p, "auto_thaw")
}

// Paused is the pause in place, nil if none: for health.
func (m *Manager) Paused() *PauseAnswer {
	m.pmu.Lock()
	p := m.pause
	m.pmu.Unlock()
	if p == nil {
		return nil
	}
	a := p.snapshot()
	return &a
}
