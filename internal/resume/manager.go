package resume

import (
	"context"
	"errors"
	"fmt"
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

// Options configures a Manager: the agent's parts that the sequences act
// on, and what the machine offers (Machine). Nil parts are skipped, and
// their steps say so.
type Options struct {
	Machine
	StateDir string
	Logger   *zap.Logger
	// Reseed turns on the clone-safety steps of every resume (clone.go):
	// the CRNG re-key and the kernels' reseed (--reseed-on-resume).
	Reseed bool
	// CRNG re-keys the kernel CRNG; nil is NewCRNG().
	CRNG Rekeyer
	// SetClock sets CLOCK_REALTIME; nil uses clock_settime.
	SetClock func(t time.Time) error

	// The agent's managers: the kernels (checked and reseeded by a
	// resume), the native clients (told of a pause and its end), the
	// endpoint (cut by a resume), user work (frozen by a pause). UserWork
	// nil skips the freeze, saying UserWorkOff.
	Kernels      Kernels
	KernelReseed KernelReseeder
	Clients      Clients
	Sessions     Sessions
	UserWork     UserWork
	UserWorkOff  string
	// OnResume runs after each sequence (the idle clock resets there).
	OnResume func()
	// OnNewSandbox renews the agent's identity when the host names
	// another sandbox than the last (clone.go).
	OnNewSandbox func(sandboxID string)
	// Version is the running agent's; Handover what an upgrade asks of
	// the rest of the agent (upgrade.go; nil: upgrades are refused).
	Version  string
	Handover Handover
}

// Machine is what the machine the agent runs on offers the sequences: the
// command line and the image decide it (cmd/rayito-agent), not the
// agent's managers.
type Machine struct {
	// KernelCheck bounds the kernel check, and the kernels' reseed; 0 is
	// DefaultKernelCheck.
	KernelCheck time.Duration
	// WholeVM allows the pause's steps that act on the whole machine
	// (FIFREEZE, dropping caches, compaction): in a sandbox VM, not on a
	// shared machine, which WholeVMWhy then names.
	WholeVM    bool
	WholeVMWhy string
	// Detect runs the guest's restore detectors once, before a pause
	// thaws by itself; true if one saw a restore and reported it.
	Detect func() bool
	// Rebaseline runs as each new resume sequence starts: the clock jump
	// detector takes new baselines there, so that the jump of a restore
	// already reported (the host's report came before the detector's
	// next tick) is not reported again later, as a restore of the next
	// pause. Nil does nothing.
	Rebaseline func()
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
	// RepairNetwork applies the host's facts, forgets the neighbours and
	// announces the guest's addresses (netconf.Repair) at every resume,
	// before user work thaws; nil never does.
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

	upgrades       int // done, since the agent started (carried across each)
	lastUpgrade    *UpgradeAnswer
	upgradeAnswers map[string]UpgradeAnswer
	upgradeOrder   []string

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
	m := &Manager{o: o, log: o.Logger, dedup: dedupState{reported: map[Source]bool{}}, answers: map[string]State{}, upgradeAnswers: map[string]UpgradeAnswer{}, crng: o.CRNG}
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
	s := State{Generation: m.gen, SandboxID: sandbox, KernelStateLost: m.lost, LastResume: m.last.withLists(), LastPause: m.lastPause,
		Upgrades: m.upgrades, LastUpgrade: m.lastUpgrade}
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
		m.runLate(ctx, r, arrived)
	} else {
		m.runResume(ctx, r, p, arrived)
	}
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
func (m *Manager) setClock(ns int64, arrived time.Time) error {
	t := time.Unix(0, ns).Add(time.Since(arrived))
	err := m.o.SetClock(t)
	switch {
	case err == nil:
		m.log.Info("clock set from host", zap.Time("time", t))
	case errors.Is(err, syscall.EPERM):
		m.log.Warn("cannot set the clock: the agent lacks CAP_SYS_TIME", zap.Error(err))
		err = fmt.Errorf("the agent lacks CAP_SYS_TIME: %w", err)
	default:
		m.log.Warn("cannot set the clock", zap.Error(err))
	}
	return err
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
