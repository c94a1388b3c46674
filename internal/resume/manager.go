package resume

import (
	"context"
	"errors"
	"maps"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/netconf"
)

// Source names a resume detector.
type Source string

const (
	SourceHost    Source = "host"    // POST /v1/resume
	SourceVMGenID Source = "vmgenid" // NEW_VMGENID uevent
	SourceVMClock Source = "vmclock" // vm_generation_counter change
	SourceClock   Source = "clock"   // guest clocks disagree by a jump
	SourceBoot    Source = "boot"    // cold boot on a disk with state
)

// Tuning of the resume sequence.
const (
	// DedupWindow is how long after a resume a report from another of the
	// guest's detectors still belongs to it (the host's report is tied to
	// the resume it reports instead: duplicate).
	DedupWindow = 5 * time.Second
	// DefaultKernelCheck bounds the kernel check: a live kernel answers
	// in milliseconds, so only a hung one costs the bound. Under software
	// emulation (QEMU TCG, whose translated code is not part of the
	// snapshot) a freshly restored kernel takes seconds: raise it there
	// (Options.KernelCheck, --kernel-check-timeout).
	DefaultKernelCheck = time.Second
	// CutBound bounds how long the sequence waits for old connections to
	// flush their end events before dropping them.
	CutBound = 2 * time.Second
	// answersKept bounds the memory of idempotent resume_id answers.
	answersKept = 64
)

// Kernels is what the sequence needs of the Jupyter manager.
type Kernels interface {
	// Check checks every kernel within ctx, marks the ones that did not
	// answer as lost, and returns every kernel's state.
	Check(ctx context.Context) []KernelHealth
	// List returns every kernel's current state without checking.
	List() []KernelHealth
}

// Sessions is what the sequence needs of the endpoint.
type Sessions interface {
	// CutForResume ends every attachment of every connection opened before
	// generation gen with reason resume, then closes those connections
	// with code 4000; it returns when that is done or ctx ends.
	CutForResume(ctx context.Context, gen uint64)
}

// Options configures a Manager. Nil interfaces are skipped.
type Options struct {
	StateDir string
	Kernels  Kernels
	Sessions Sessions
	// SetClock sets CLOCK_REALTIME; nil uses clock_settime.
	SetClock func(t time.Time) error
	// OnResume runs after each sequence (the idle clock resets there).
	OnResume func()
	// Rebaseline runs as each new resume sequence starts: the clock jump
	// detector takes new baselines there, so that the jump of a restore
	// already reported (the host's report came before the detector's
	// next tick) is not reported again later, as a restore of the next
	// pause. Nil does nothing.
	Rebaseline func()
	// KernelCheck bounds the kernel check, and the kernels' reseed; 0 is
	// DefaultKernelCheck.
	KernelCheck time.Duration
	Logger      *zap.Logger
	// Reseed turns on the clone-safety steps of every resume (clone.go):
	// the CRNG re-key and the kernels' reseed (--reseed-on-resume).
	Reseed bool
	// CRNG re-keys the kernel CRNG; nil is NewCRNG().
	CRNG Rekeyer
	// KernelReseed reseeds the kernels' PRNGs; nil skips it.
	KernelReseed KernelReseeder
	// OnNewSandbox renews the agent's identity when the host names
	// another sandbox than the last (clone.go).
	OnNewSandbox func(sandboxID string)

	// What a pause acts on (pause.go). Clients nil skips telling them;
	// UserWork nil skips the freeze, saying UserWorkOff.
	Clients     Clients
	UserWork    UserWork
	UserWorkOff string
	// WholeVM allows the pause's steps that act on the whole machine
	// (FIFREEZE, dropping caches, compaction): in a sandbox VM, not on a
	// shared machine, which WholeVMWhy then names.
	WholeVM    bool
	WholeVMWhy string
	// Detect runs the guest's restore detectors once, before a pause
	// thaws by itself; true if one saw a restore and reported it.
	Detect func() bool
	// Hooks are the sandbox's lifecycle hooks (hooks.go); nil runs none.
	Hooks *Hooks
	// LifecycleFile is the lifecycle feed (lifecycle.go); "" writes none.
	LifecycleFile string
	// ResetTCP resets the TCP connections user programs hold to other
	// machines (netreset.go: ResetStaleTCP); nil never does. It runs on
	// every clone, and on a resume after a pause longer than StaleAfter
	// (0: only clones), while user work is still frozen.
	ResetTCP   func() ([]Conn, error)
	StaleAfter time.Duration
	// RepairNetwork applies the host's network facts, forgets the
	// neighbours and announces the guest's addresses (netconf.Repair) at
	// every resume, before user work thaws; nil never does.
	RepairNetwork func(netconf.Facts) netconf.Report
}

// Report is one detector saying the VM was resumed.
type Report struct {
	Source     Source
	ResumeID   string // host reports: retries with the same id are one resume
	TimeUnixNs int64  // host reports: the wall clock to set
	Entropy    []byte // host reports: material for the CRNG re-key
	SandboxID  string // host reports: the sandbox this copy now is
	// Network is what the host says of the guest's network now (host
	// reports; zero: nothing changes).
	Network netconf.Facts
	// NoticedAt is when a guest detector noticed the restore (zero: when
	// Resume is called). A detection older than the pause in place is
	// not a restore after that pause; see takePauseFor.
	NoticedAt time.Time
}

// Manager owns the resume generation. Safe for concurrent use.
type Manager struct {
	o   Options
	log *zap.Logger

	seq sync.Mutex // one sequence at a time, in arrival order

	mu          sync.Mutex
	gen         uint64
	lost        bool
	lostKernels []KernelHealth // kernels lost by a cold boot
	last        *LastResume
	dedup       dedupState      // what reports of the current resume are told apart by
	goneBefore  map[string]bool // kernels already lost or dead at the last resume
	saveMu      sync.Mutex
	saved       uint64 // the generation on disk; guarded by saveMu
	sandbox     string // the last sandbox id; guarded by saveMu
	crng        Rekeyer
	answers     map[string]State
	answerOrder []string

	pmu       sync.Mutex
	pause     *pause     // the pause in place; guarded by pmu
	lastPause *PauseEnd  // guarded by mu
	lifeMu    sync.Mutex // one lifecycle file write at a time
}

// New loads the persisted state. On a cold boot over existing state it
// bumps the generation and reports the kernels that existed as lost.
func New(o Options) (*Manager, error) {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.SetClock == nil {
		o.SetClock = SetRealtime
	}
	if o.KernelCheck <= 0 {
		o.KernelCheck = DefaultKernelCheck
	}
	if o.CRNG == nil {
		o.CRNG = NewCRNG()
	}
	m := &Manager{o: o, log: o.Logger, dedup: dedupState{reported: map[Source]bool{}}, answers: map[string]State{}, crng: o.CRNG}
	if err := o.CRNG.Unable(); err != nil && o.Reseed {
		m.log.Warn("resumes will not re-key the kernel CRNG", zap.Error(err))
	}
	if o.StateDir == "" {
		m.writeLifecycle()
		return m, nil
	}
	p, found, err := loadState(o.StateDir)
	if err != nil {
		return nil, err
	}
	boot := bootID()
	m.gen = p.Generation
	m.sandbox = p.SandboxID
	if err := CheckSandboxID(p.SandboxID); err != nil {
		// Saved by an agent that took any id: kept, it would break every
		// hook's start from now on.
		m.log.Warn("forgetting the saved sandbox id", zap.Error(err))
		m.sandbox = ""
	}
	if found && p.BootID != boot {
		m.gen++
		for _, k := range p.Kernels {
			m.lostKernels = append(m.lostKernels, KernelHealth{Kernel: k, State: "lost"})
		}
		m.lost = len(p.Kernels) > 0
		m.last = &LastResume{Source: SourceBoot, AtUnixMs: time.Now().UnixMilli()}
		m.log.Info("cold boot over earlier state", zap.Uint64("generation", m.gen), zap.Strings("lost_kernels", p.Kernels))
	} else if found && len(p.Kernels) > 0 {
		// The agent restarted within one boot: its kernels were its
		// children and cannot be reached any more.
		for _, k := range p.Kernels {
			m.lostKernels = append(m.lostKernels, KernelHealth{Kernel: k, State: "lost"})
		}
		m.lost = true
	}
	if err := saveState(o.StateDir, persisted{Generation: m.gen, BootID: boot, SandboxID: m.sandbox}); err != nil {
		return nil, err
	}
	m.saved = m.gen
	m.writeLifecycle()
	return m, nil
}

// State returns the current resume state.
func (m *Manager) State() State {
	m.saveMu.Lock()
	sandbox := m.sandbox
	m.saveMu.Unlock()
	m.mu.Lock()
	s := State{Generation: m.gen, SandboxID: sandbox, KernelStateLost: m.lost, LastResume: m.last.withLists(), LastPause: m.lastPause}
	s.Kernels = append(s.Kernels, m.lostKernels...)
	m.mu.Unlock()
	s.Pause = m.Paused()
	if m.o.Kernels != nil {
		s.Kernels = append(s.Kernels, m.o.Kernels.List()...)
	}
	if s.Kernels == nil {
		s.Kernels = []KernelHealth{}
	}
	return s
}

// Generation returns the published generation.
func (m *Manager) Generation() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen
}

// Resume runs the resume sequence for a report, unless the report belongs
// to a resume already handled, and returns the state after it.
func (m *Manager) Resume(ctx context.Context, r Report) State {
	// A host's time is when it sent the report; the report may wait
	// below for a sequence in progress (seconds when a kernel is slow).
	arrived := time.Now()
	// A pause in place stops quiescing now; what it froze thaws below,
	// late (pause.go).
	p, stale := m.takePauseFor(r)
	if stale {
		m.log.Debug("resume already handled before the pause", zap.String("source", string(r.Source)))
		return m.State()
	}
	m.seq.Lock()
	defer m.seq.Unlock()
	if r.ResumeID != "" {
		m.mu.Lock()
		ans, ok := m.answers[r.ResumeID]
		m.mu.Unlock()
		if ok {
			if p != nil {
				// A retry of an earlier resume: not a restore of this pause.
				m.abort(p, "abort")
			}
			return ans
		}
	}
	if m.duplicate(r.Source) {
		if p != nil {
			m.finishPause(p, "resume", false)
		}
		m.log.Debug("resume already handled", zap.String("source", string(r.Source)))
		if r.TimeUnixNs > 0 {
			m.setClock(r.TimeUnixNs, arrived)
		}
		// The host's bytes came after the guest noticed the restore by
		// itself: they are mixed in now, on top of the earlier re-key.
		if len(r.Entropy) > 0 && m.o.Reseed {
			if sources, err := m.crng.Rekey(r.Entropy); err == nil {
				m.amendLast(func(l *LastResume) {
					l.Reseeded = true
					l.EntropySources = mergeSources(l.EntropySources, sources)
				})
			}
		}
		if m.o.RepairNetwork != nil && !r.Network.Empty() {
			// The host's facts came after the guest noticed the restore
			// by itself: applied now.
			rep := m.o.RepairNetwork(r.Network)
			m.amendLast(func(l *LastResume) { l.Network = &rep })
		}
		if m.adopt(r.SandboxID) {
			// The guest noticed this clone's restore before the host
			// named it: its connections are reset now, late.
			// So are its post-clone hooks.
			var late LastResume
			m.resetStale(&late)
			if m.o.Hooks != nil {
				env := HookEnv{Generation: m.Generation(), SandboxID: m.sandboxID(), Clone: true}
				late.Hooks = m.o.Hooks.Run(ctx, HookPostClone, env, nil)
			}
			m.amendLast(func(l *LastResume) {
				l.NewSandbox = true
				l.ConnectionsReset = append(l.ConnectionsReset[:len(l.ConnectionsReset):len(l.ConnectionsReset)], late.ConnectionsReset...)
				l.ResetError = late.ResetError
				l.Hooks = append(l.Hooks[:len(l.Hooks):len(l.Hooks)], late.Hooks...)
			})
			m.writeLifecycle()
		}
		return m.remember(r.ResumeID, m.State())
	}
	start := time.Now()
	if m.o.Rebaseline != nil {
		m.o.Rebaseline()
	}
	if r.TimeUnixNs > 0 {
		m.setClock(r.TimeUnixNs, arrived)
	}
	// Clone safety first: nothing below (the kernel check's messages, the
	// kernels' reseed) may draw from the CRNG the clones still share.
	last := &LastResume{Source: r.Source, ResumeID: r.ResumeID, AtUnixMs: start.UnixMilli()}
	m.rekey(r.Entropy, last)
	var paused int64
	if p != nil {
		paused = p.pausedMs()
		last.PausedMs = &paused
	}
	clone := r.SandboxID != "" && r.SandboxID != m.sandboxID()
	if clone || (p != nil && m.o.StaleAfter > 0 && time.Duration(paused)*time.Millisecond > m.o.StaleAfter) {
		// Before the thaw: the owners' first step after it fails at once.
		m.resetStale(last)
	}
	if m.o.RepairNetwork != nil {
		rep := m.o.RepairNetwork(r.Network)
		last.Network = &rep
	}
	if p != nil {
		// Only now, with the new clock and CRNG, does user work run
		// again: kernels with it, just before their check and reseed.
		m.thaw(p, "resume")
	}
	// A kernel counts as lost if it stopped answering or died since the
	// last resume: either way its variables are gone. One already reported
	// lost or dead then is not reported again. A slow one (alive, no
	// answer yet) is not lost: the check follows it, and KernelLost says
	// if it never answers.
	lost := false
	gone := map[string]bool{}
	if m.o.Kernels != nil {
		cctx, cancel := context.WithTimeout(ctx, m.o.KernelCheck)
		checked := m.o.Kernels.Check(cctx)
		cancel()
		m.mu.Lock()
		for _, k := range checked {
			if k.State == "lost" || k.State == "dead" {
				gone[k.Kernel] = true
				lost = lost || !m.goneBefore[k.Kernel]
			}
		}
		m.mu.Unlock()
	}
	m.mu.Lock()
	m.goneBefore = gone
	m.mu.Unlock()
	m.reseedKernels(ctx, last)
	last.NewSandbox = m.adopt(r.SandboxID)
	// On disk before anyone sees it: a crash right after a client read
	// the new generation must not bring the agent back with the old one.
	// Only Resume changes gen, and it runs one at a time.
	gen := m.Generation() + 1
	if m.o.Hooks != nil {
		// After the thaw, before the generation is published (health
		// says ready): a clone's hooks first, then every resume's.
		env := HookEnv{Generation: gen, SandboxID: m.sandboxID(), Clone: last.NewSandbox}
		if last.PausedMs != nil {
			env.PausedMs = *last.PausedMs
		}
		if last.NewSandbox {
			last.Hooks = append(last.Hooks, m.o.Hooks.Run(ctx, HookPostClone, env, nil)...)
		}
		last.Hooks = append(last.Hooks, m.o.Hooks.Run(ctx, HookPostResume, env, nil)...)
	}
	if err := m.persistGeneration(gen); err != nil {
		m.log.Error("saving the new generation failed: after a crash the agent would report an older one", zap.Uint64("generation", gen), zap.Error(err))
	}
	m.mu.Lock()
	m.gen = gen
	m.lost = lost
	m.lostKernels = nil
	// Published with the generation, so a health read showing gen also
	// shows which resume it was.
	m.last = last
	m.mu.Unlock()
	if p != nil && m.o.Clients != nil {
		m.o.Clients.Resumed(gen, false)
	}
	if m.o.Sessions != nil {
		cctx, cancel := context.WithTimeout(ctx, CutBound)
		m.o.Sessions.CutForResume(cctx, gen)
		cancel()
	}
	if m.o.OnResume != nil {
		m.o.OnResume()
	}
	m.mu.Lock()
	// A new value: State hands the old pointer to readers.
	done := *m.last
	// From the report's arrival: what the caller waited, the end of an
	// overtaken pause and an earlier sequence included.
	done.DurationMs = time.Since(arrived).Milliseconds()
	m.last = &done
	// The window runs from the end of the sequence: reports of this
	// restore that waited behind a slow kernel check still belong to it.
	m.dedup.at = time.Now()
	m.mu.Unlock()
	m.writeLifecycle()
	m.log.Info("resumed", zap.Uint64("generation", gen), zap.String("source", string(r.Source)),
		zap.Bool("kernel_state_lost", lost), zap.Bool("reseeded", last.Reseeded), zap.Strings("entropy_sources", last.EntropySources),
		zap.Int("kernels_reseeded", len(last.KernelsReseeded)), zap.Int("kernels_not_reseeded", len(last.KernelsNotReseeded)),
		zap.Duration("took", time.Since(start)))
	return m.remember(r.ResumeID, m.State())
}

// KernelLost records that a kernel the last resume's check found slow (a
// live process that had not answered yet) never answered after all: the
// resume lost it, so kernel_state_lost becomes true, unless it was gone
// already at the resume before.
func (m *Manager) KernelLost(kernel string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.goneBefore[kernel] {
		return
	}
	if m.goneBefore == nil {
		m.goneBefore = map[string]bool{}
	}
	m.goneBefore[kernel] = true
	m.lost = true
	m.log.Warn("a kernel slow after the resume never answered: kernel state lost", zap.String("kernel", kernel))
}

// duplicate decides whether a report belongs to the current resume, and
// records the source's report either way.
//
// The host's report is tied to the resume it reports, not to a time: it
// belongs to the latest resume if the guest noticed that one by itself
// and the host has not reported it yet, however long after (under
// software emulation the host's call came 16 s after the guest's
// detection); otherwise it is a new resume. The guest's detectors, which
// fire within a second of a restore, keep the DedupWindow.
func (m *Manager) duplicate(src Source) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	var same bool
	if src == SourceHost {
		same = m.last != nil && m.last.Source != SourceHost && !m.dedup.reported[SourceHost]
	} else {
		same = m.dedup.claims(src, now)
	}
	if same {
		m.dedup.reported[src] = true
		return true
	}
	m.dedup = dedupState{at: now, reported: map[Source]bool{src: true}}
	return false
}

// dedupState is what guest detections are deduplicated against: when the
// current resume was handled, and which sources reported it.
type dedupState struct {
	at       time.Time
	reported map[Source]bool // never nil
}

// claims reports whether a guest detection by src noticed at t belongs to
// the resume d describes: within DedupWindow of it, from a source that
// has not reported it yet.
func (d dedupState) claims(src Source, t time.Time) bool {
	return !d.at.IsZero() && t.Sub(d.at) < DedupWindow && !d.reported[src]
}

func (d dedupState) clone() dedupState {
	return dedupState{at: d.at, reported: maps.Clone(d.reported)}
}

func (m *Manager) remember(id string, s State) State {
	if id == "" {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.answers[id]; !ok {
		m.answers[id] = s
		m.answerOrder = append(m.answerOrder, id)
		if len(m.answerOrder) > answersKept {
			delete(m.answers, m.answerOrder[0])
			m.answerOrder = m.answerOrder[1:]
		}
	}
	return s
}

// setClock sets the wall clock to the host's time ns, plus the time since
// the report arrived.
func (m *Manager) setClock(ns int64, arrived time.Time) {
	t := time.Unix(0, ns).Add(time.Since(arrived))
	err := m.o.SetClock(t)
	switch {
	case err == nil:
		m.log.Info("clock set from host", zap.Time("time", t))
	case errors.Is(err, syscall.EPERM):
		m.log.Warn("cannot set the clock: the agent lacks CAP_SYS_TIME", zap.Error(err))
	default:
		m.log.Warn("cannot set the clock", zap.Error(err))
	}
}

// KernelsChanged persists the current set of live kernels; call it when
// a kernel starts or goes away.
func (m *Manager) KernelsChanged() { m.persist() }

// SaveKernels records which kernels exist, so a cold boot can report them.
func (m *Manager) SaveKernels(ids []string) {
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	if err := m.saveLocked(ids); err != nil {
		m.log.Warn("saving state", zap.Error(err))
	}
}

// saveLocked writes the generation already on disk (never a published
// one that is not) and the kernel ids; saveMu must be held.
func (m *Manager) saveLocked(ids []string) error {
	if m.o.StateDir == "" {
		return nil
	}
	return saveState(m.o.StateDir, persisted{Generation: m.saved, BootID: bootID(), Kernels: ids, SandboxID: m.sandbox})
}

// persist saves the generation and the live kernels; listing under saveMu
// keeps two concurrent saves from writing a stale list last.
func (m *Manager) persist() {
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	if err := m.saveLocked(m.liveKernels()); err != nil {
		m.log.Warn("saving state", zap.Error(err))
	}
}

// persistGeneration writes gen, with the live kernels, to disk.
func (m *Manager) persistGeneration(gen uint64) error {
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	m.saved = gen
	return m.saveLocked(m.liveKernels())
}

func (m *Manager) liveKernels() []string {
	var ids []string
	if m.o.Kernels != nil {
		for _, k := range m.o.Kernels.List() {
			if k.State != "lost" && k.State != "dead" {
				ids = append(ids, k.Kernel)
			}
		}
	}
	return ids
}

// SetRealtime sets CLOCK_REALTIME (needs CAP_SYS_TIME).
func SetRealtime(t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	return unix.ClockSettime(unix.CLOCK_REALTIME, &ts)
}

// resetStale resets stale TCP connections (Options.ResetTCP) and records
// what it did in last.
func (m *Manager) resetStale(last *LastResume) {
	if m.o.ResetTCP == nil {
		return
	}
	conns, err := m.o.ResetTCP()
	last.ConnectionsReset = append(last.ConnectionsReset, conns...)
	if err != nil {
		last.ResetError = err.Error()
		m.log.Warn("resetting stale TCP connections", zap.Error(err))
	}
	if len(conns) > 0 {
		m.log.Info("stale TCP connections reset", zap.Int("connections", len(conns)))
	}
}

// amendLast changes the published last resume: a new value, since State
// hands the old one's pointer to readers (the lists amended must be
// appended to past their length, never in place).
func (m *Manager) amendLast(f func(*LastResume)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last != nil {
		upd := *m.last
		f(&upd)
		m.last = &upd
	}
}
