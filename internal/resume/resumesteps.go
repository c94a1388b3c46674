package resume

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
)

// The resume sequence, as named steps (sequence.go). Its order is the
// point: clone safety (the clock, the CRNG) before anything may draw on
// either; the connections reset and the network repaired while user work
// is still frozen, so the owners' first step after the thaw fails at once;
// kernels checked and reseeded after the thaw; hooks after that and before
// the generation is published (health says ready); clients told and old
// connections cut only once the generation they reattach to is published.

// resumeStep is one row of a sequence: a name and its work on a run.
type resumeStep struct {
	name string
	run  func(*resumeRun) (detail string, skip bool, err error)
}

// resumeSequence is a new restore's sequence.
var resumeSequence = []resumeStep{
	{"rebaseline", (*resumeRun).rebaseline},
	{"clock", (*resumeRun).clock},
	{"rekey", (*resumeRun).rekey},
	{"stale_connections", (*resumeRun).staleConnections},
	{"network", (*resumeRun).network},
	{"thaw", (*resumeRun).thaw},
	{"kernel_check", (*resumeRun).kernelCheck},
	{"kernel_reseed", (*resumeRun).kernelReseed},
	{"sandbox", (*resumeRun).sandbox},
	{"hooks", (*resumeRun).hooks},
	{"publish", (*resumeRun).publish},
	{"notify", (*resumeRun).notify},
	{"cut", (*resumeRun).cut},
	{"traffic", (*resumeRun).traffic},
}

// lateSequence is a later report of a restore already handled (the host's
// report after a guest detector's): it brings what the guest could not
// know by itself (the time, entropy, the network, the sandbox's name), so
// only those steps run, on top of the resume already published.
var lateSequence = []resumeStep{
	{"clock", (*resumeRun).clock},
	{"rekey", (*resumeRun).rekey},
	{"network", (*resumeRun).network},
	{"sandbox", (*resumeRun).sandbox},
	{"stale_connections", (*resumeRun).staleConnections},
	{"hooks", (*resumeRun).hooks},
}

// resumeRun is one resume sequence in progress: what its steps share.
// Only one runs at a time (the Manager's seq).
type resumeRun struct {
	m       *Manager
	ctx     context.Context
	r       Report
	p       *pause    // the pause it ends; nil if none
	arrived time.Time // when the report arrived
	// late: the report belongs to the resume already published, and last
	// is a copy of that one's, amended.
	late bool
	last *LastResume // what it publishes
	gen  uint64      // the generation it publishes
	lost bool        // a kernel was lost since the last resume
	// adopted: this run's sandbox step took a new identity.
	adopted bool
	steps   steps
}

// runResume runs a new restore's sequence for r and publishes it.
func (m *Manager) runResume(ctx context.Context, r Report, p *pause, arrived time.Time) {
	start := time.Now()
	rr := &resumeRun{m: m, ctx: ctx, r: r, p: p, arrived: arrived, gen: m.Generation() + 1,
		last: &LastResume{Source: r.Source, ResumeID: r.ResumeID, AtUnixMs: start.UnixMilli()}}
	for _, s := range resumeSequence {
		rr.steps.run(s.name, func() (string, bool, error) { return s.run(rr) })
	}
	m.mu.Lock()
	// A new value: State hands the old pointer to readers.
	done := *m.last
	done.Steps = rr.steps.snapshot()
	// From the report's arrival: what the caller waited, the end of an
	// overtaken pause and an earlier sequence included.
	done.DurationMs = time.Since(arrived).Milliseconds()
	m.last = &done
	// The window runs from the end of the sequence: reports of this
	// restore that waited behind a slow kernel check still belong to it.
	m.dedup.at = time.Now()
	m.mu.Unlock()
	m.writeLifecycle()
	last := rr.last
	m.log.Info("resumed", zap.Uint64("generation", rr.gen), zap.String("source", string(r.Source)),
		zap.Bool("kernel_state_lost", rr.lost), zap.Bool("reseeded", last.Reseeded), zap.Strings("entropy_sources", last.EntropySources),
		zap.Int("kernels_reseeded", len(last.KernelsReseeded)), zap.Int("kernels_not_reseeded", len(last.KernelsNotReseeded)),
		zap.Any("steps", done.Steps), zap.Duration("took", time.Since(start)))
}

// runLate runs the late sequence for r, a later report of the published
// resume, and amends that resume with what it did.
func (m *Manager) runLate(ctx context.Context, r Report, arrived time.Time) {
	m.mu.Lock()
	var last LastResume
	if m.last != nil {
		last = *m.last
	}
	m.mu.Unlock()
	// The lists the steps append to are the published one's: clipped, an
	// append copies them rather than write past a reader's length.
	last.EntropySources = slices.Clip(last.EntropySources)
	last.ConnectionsReset = slices.Clip(last.ConnectionsReset)
	last.Hooks = slices.Clip(last.Hooks)
	last.LateSteps = slices.Clip(last.LateSteps)
	rr := &resumeRun{m: m, ctx: ctx, r: r, arrived: arrived, late: true, gen: m.Generation(), last: &last}
	for _, s := range lateSequence {
		rr.steps.run(s.name, func() (string, bool, error) { return s.run(rr) })
	}
	done := rr.steps.snapshot()
	if !slices.ContainsFunc(done, func(s Step) bool { return s.Status != StepSkipped }) {
		return // a guest detector's report: it brought nothing
	}
	last.LateSteps = append(last.LateSteps, done...)
	m.mu.Lock()
	if m.last != nil {
		m.last = &last
	}
	m.mu.Unlock()
	if rr.adopted {
		m.writeLifecycle()
	}
	m.log.Info("a later report of the resume", zap.String("source", string(r.Source)), zap.Any("steps", done))
}

func (rr *resumeRun) rebaseline() (string, bool, error) {
	if rr.m.o.Rebaseline == nil {
		return "no clock jump detector", true, nil
	}
	rr.m.o.Rebaseline()
	return "the clock jump detector took new baselines", false, nil
}

// clock sets the wall clock from the host's report; the pause's length is
// measured by it.
func (rr *resumeRun) clock() (string, bool, error) {
	defer rr.measurePause()
	if rr.r.TimeUnixNs <= 0 {
		return "the report gave no time", true, nil
	}
	if err := rr.m.setClock(rr.r.TimeUnixNs, rr.arrived); err != nil {
		return "", false, err
	}
	return "set from the host's time", false, nil
}

func (rr *resumeRun) measurePause() {
	if rr.p != nil {
		paused := rr.p.pausedMs()
		rr.last.PausedMs = &paused
	}
}

// rekey re-keys the kernel CRNG (clone.go), first: nothing later (the
// kernel check's messages, the kernels' reseed) may draw from the CRNG the
// clones still share. A late report's bytes are mixed in on top of the
// re-key the guest's own detection already did.
func (rr *resumeRun) rekey() (string, bool, error) {
	m, last := rr.m, rr.last
	if !m.o.Reseed {
		if !rr.late {
			last.ReseedError = "turned off (--reseed-on-resume=false)"
		}
		return "turned off (--reseed-on-resume=false)", true, nil
	}
	if rr.late && len(rr.r.Entropy) == 0 {
		return "the report gave no entropy", true, nil
	}
	sources, err := m.crng.Rekey(rr.r.Entropy)
	if err != nil {
		if !rr.late {
			last.EntropySources, last.ReseedError = sources, err.Error()
			m.log.Warn("the kernel CRNG was not re-keyed", zap.Error(err))
		}
		return "", false, err
	}
	last.Reseeded = true
	last.EntropySources = mergeSources(last.EntropySources, sources)
	return "from " + strings.Join(sources, ", "), false, nil
}

// staleConnections resets the TCP connections user programs hold to
// other machines on a clone, or after a pause longer than StaleAfter,
// before the thaw: the owners' first step after it fails at once. A late
// report resets them when it is the one that names the clone.
func (rr *resumeRun) staleConnections() (string, bool, error) {
	m, last := rr.m, rr.last
	if m.o.ResetTCP == nil {
		return "no connection reset on this machine", true, nil
	}
	if rr.late {
		if !rr.adopted {
			return "not a clone", true, nil
		}
	} else {
		clone := rr.r.SandboxID != "" && rr.r.SandboxID != m.sandboxID()
		long := last.PausedMs != nil && m.o.StaleAfter > 0 && time.Duration(*last.PausedMs)*time.Millisecond > m.o.StaleAfter
		if !clone && !long {
			return "neither a clone nor a pause longer than stale_after", true, nil
		}
	}
	conns, err := m.o.ResetTCP()
	last.ConnectionsReset = append(last.ConnectionsReset, conns...)
	if len(conns) > 0 {
		m.log.Info("stale TCP connections reset", zap.Int("connections", len(conns)))
	}
	if err != nil {
		last.ResetError = err.Error()
		m.log.Warn("resetting stale TCP connections", zap.Error(err))
		return fmt.Sprintf("%d connections reset", len(conns)), false, err
	}
	if rr.late {
		last.ResetError = ""
	}
	return fmt.Sprintf("%d connections reset", len(conns)), false, nil
}

// network applies the host's facts, forgets the neighbours and announces
// the guest's addresses; a late report only when it brings facts.
func (rr *resumeRun) network() (string, bool, error) {
	m := rr.m
	if m.o.RepairNetwork == nil {
		return "no network repair on this machine", true, nil
	}
	if rr.late && rr.r.Network.Empty() {
		return "the report gave no network facts", true, nil
	}
	rep := m.o.RepairNetwork(rr.r.Network)
	rr.last.Network = &rep
	d := fmt.Sprintf("%s: %d neighbours forgotten, %d addresses announced", rep.Interface, rep.NeighboursFlushed, len(rep.Announced))
	if len(rep.Changed) > 0 {
		d += ", changed " + strings.Join(rep.Changed, ", ")
	}
	if rep.Error != "" {
		return d, false, fmt.Errorf("%s", rep.Error)
	}
	return d, false, nil
}

// thaw thaws what the pause froze: only now, with the new clock and CRNG,
// does user work run again, kernels with it, just before their check.
func (rr *resumeRun) thaw() (string, bool, error) {
	if rr.p == nil {
		return "no pause in place", true, nil
	}
	var done []string
	var failed []string
	for _, s := range rr.m.thaw(rr.p, "resume") {
		if s.Status == StepFailed {
			failed = append(failed, s.Step+": "+s.Detail)
		} else {
			done = append(done, s.Step)
		}
	}
	if len(done) == 0 && len(failed) == 0 {
		return "the pause froze nothing", false, nil
	}
	if len(failed) > 0 {
		return strings.Join(done, ", "), false, fmt.Errorf("%s", strings.Join(failed, "; "))
	}
	return strings.Join(done, ", "), false, nil
}

// kernelCheck counts a kernel as lost if it stopped answering or died
// since the last resume: either way its variables are gone. One already
// reported lost or dead then is not reported again. A slow one (alive, no
// answer yet) is not lost: the check follows it, and KernelLost says if it
// never answers.
func (rr *resumeRun) kernelCheck() (string, bool, error) {
	m := rr.m
	gone := map[string]bool{}
	defer func() {
		m.mu.Lock()
		m.goneBefore = gone
		m.mu.Unlock()
	}()
	if m.o.Kernels == nil {
		return "no kernel manager", true, nil
	}
	cctx, cancel := context.WithTimeout(rr.ctx, m.o.KernelCheck)
	checked := m.o.Kernels.Check(cctx)
	cancel()
	var names []string
	m.mu.Lock()
	for _, k := range checked {
		if k.State == "lost" || k.State == "dead" {
			gone[k.Kernel] = true
			if !m.goneBefore[k.Kernel] {
				rr.lost = true
				names = append(names, k.Kernel)
			}
		}
	}
	m.mu.Unlock()
	d := fmt.Sprintf("%d kernels checked", len(checked))
	if len(names) > 0 {
		d += ", lost: " + strings.Join(names, ", ")
	}
	return d, false, nil
}

func (rr *resumeRun) kernelReseed() (string, bool, error) {
	m, last := rr.m, rr.last
	if !m.o.Reseed {
		return "turned off (--reseed-on-resume=false)", true, nil
	}
	if m.o.KernelReseed == nil {
		return "no kernel manager", true, nil
	}
	ctx, cancel := context.WithTimeout(rr.ctx, m.o.KernelCheck)
	defer cancel()
	last.KernelsReseeded, last.KernelsNotReseeded = m.o.KernelReseed.Reseed(ctx)
	for _, k := range last.KernelsNotReseeded {
		m.log.Warn("a kernel was not reseeded: its PRNGs may equal those of other sandboxes made from the same snapshot", zap.String("kernel", k.Kernel), zap.String("reason", k.Reason))
	}
	return fmt.Sprintf("%d reseeded, %d not", len(last.KernelsReseeded), len(last.KernelsNotReseeded)), false, nil
}

// sandbox takes a new identity when the report names another sandbox
// than the last (clone.go).
func (rr *resumeRun) sandbox() (string, bool, error) {
	id := rr.r.SandboxID
	if id == "" {
		return "the report named no sandbox", true, nil
	}
	if !rr.m.adopt(id) {
		return "still " + id, false, nil
	}
	rr.last.NewSandbox, rr.adopted = true, true
	return "a new sandbox: " + id, false, nil
}

// hooks runs the post-clone hooks (a clone's) and then the post-resume
// hooks, after the thaw and before the generation is published. A late
// report runs the post-clone hooks when it is the one naming the clone.
func (rr *resumeRun) hooks() (string, bool, error) {
	m, last := rr.m, rr.last
	if m.o.Hooks == nil {
		return "no hook directory", true, nil
	}
	env := HookEnv{Generation: rr.gen, SandboxID: m.sandboxID(), Clone: last.NewSandbox}
	var rs []HookResult
	if rr.late {
		if !rr.adopted {
			return "not a clone", true, nil
		}
		rs = m.o.Hooks.Run(rr.ctx, HookPostClone, env, nil)
	} else {
		if last.PausedMs != nil {
			env.PausedMs = *last.PausedMs
		}
		if last.NewSandbox {
			rs = m.o.Hooks.Run(rr.ctx, HookPostClone, env, nil)
		}
		rs = append(rs, m.o.Hooks.Run(rr.ctx, HookPostResume, env, nil)...)
	}
	last.Hooks = append(last.Hooks, rs...)
	return hooksDetail(rs), false, nil
}

// publish makes the generation the new one: on disk before anyone sees
// it, so a crash right after a client read it does not bring the agent
// back with the old one; then in memory with the kernels' state and the
// last resume, so a health read showing the generation shows which
// resume it was.
func (rr *resumeRun) publish() (string, bool, error) {
	m := rr.m
	err := m.persistGeneration(rr.gen)
	if err != nil {
		m.log.Error("saving the new generation failed: after a crash the agent would report an older one", zap.Uint64("generation", rr.gen), zap.Error(err))
	}
	m.mu.Lock()
	m.gen = rr.gen
	m.lost = rr.lost
	m.lostKernels = nil
	m.last = rr.last
	m.mu.Unlock()
	return fmt.Sprintf("generation %d", rr.gen), false, err
}

// notify tells the clients the pause they heard of is over.
func (rr *resumeRun) notify() (string, bool, error) {
	if rr.p == nil {
		return "no pause: no client heard of one", true, nil
	}
	if rr.m.o.Clients == nil {
		return "no native endpoint", true, nil
	}
	rr.m.o.Clients.Resumed(rr.gen, false)
	return "clients told", false, nil
}

// cut ends every connection opened before the restore, so clients
// reattach from their cursors.
func (rr *resumeRun) cut() (string, bool, error) {
	if rr.m.o.Sessions == nil {
		return "no endpoint", true, nil
	}
	ctx, cancel := context.WithTimeout(rr.ctx, CutBound)
	defer cancel()
	rr.m.o.Sessions.CutForResume(ctx, rr.gen)
	return fmt.Sprintf("connections of generations before %d cut", rr.gen), false, nil
}

// traffic restarts the idle clock: a resume is activity.
func (rr *resumeRun) traffic() (string, bool, error) {
	if rr.m.o.OnResume == nil {
		return "no traffic counter", true, nil
	}
	rr.m.o.OnResume()
	return "the idle clock restarted", false, nil
}
