package resume

import (
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/handover"
)

// What the lifecycle carries across an upgrade's exec: the generation and
// identity (also on disk, but a state directory is optional), how the
// last resume, pause and upgrades went, the answers kept for repeated
// resume_ids and upgrade_ids, and the upgrade in progress.
const (
	sectionLifecycle  = "lifecycle"
	fileUpgradeCaller = "upgrade/caller" // the host's connection
)

// upgradeRecord is the upgrade in progress, as the exec left it.
type upgradeRecord struct {
	ID            string `json:"id,omitempty"`
	From          string `json:"from"`
	To            string `json:"to"`
	Format        int    `json:"format"`
	Steps         []Step `json:"steps"`
	StartedUnixNs int64  `json:"started_unix_ns"`
	ExecUnixNs    int64  `json:"exec_unix_ns"`
	FrozenUnixNs  int64  `json:"frozen_unix_ns,omitempty"` // 0: user work was not frozen
}

type lifecycleCarried struct {
	Generation     uint64                   `json:"generation"`
	SandboxID      string                   `json:"sandbox_id,omitempty"`
	Lost           bool                     `json:"kernel_state_lost"`
	LostKernels    []KernelHealth           `json:"lost_kernels,omitempty"`
	LastResume     *LastResume              `json:"last_resume,omitempty"`
	LastPause      *PauseEnd                `json:"last_pause,omitempty"`
	ResumeAnswers  map[string]State         `json:"resume_answers,omitempty"`
	ResumeOrder    []string                 `json:"resume_order,omitempty"`
	Upgrades       int                      `json:"upgrades"`
	LastUpgrade    *UpgradeAnswer           `json:"last_upgrade,omitempty"`
	UpgradeAnswers map[string]UpgradeAnswer `json:"upgrade_answers,omitempty"`
	UpgradeOrder   []string                 `json:"upgrade_order,omitempty"`
	Upgrade        upgradeRecord            `json:"upgrade"`
}

// carry is the lifecycle's section, with rec the upgrade in progress.
func (m *Manager) carry(rec upgradeRecord) lifecycleCarried {
	sandbox := m.sandboxID()
	m.mu.Lock()
	defer m.mu.Unlock()
	return lifecycleCarried{Generation: m.gen, SandboxID: sandbox, Lost: m.lost, LostKernels: m.lostKernels,
		LastResume: m.last, LastPause: m.lastPause, ResumeAnswers: m.answers, ResumeOrder: m.answerOrder,
		Upgrades: m.upgrades, LastUpgrade: m.lastUpgrade, UpgradeAnswers: m.upgradeAnswers, UpgradeOrder: m.upgradeOrder,
		Upgrade: rec}
}

// Adopted is an upgrade this agent took over, until FinishUpgrade.
type Adopted struct {
	rec     upgradeRecord
	adopted time.Time
	caller  *os.File
	// failed is why the new agent handed back to this one ("": this is
	// the new agent).
	failed string
}

// AdoptUpgrade takes the lifecycle's state from the agent that handed
// over, before anything serves.
func (m *Manager) AdoptUpgrade(s *handover.State) (*Adopted, error) {
	var c lifecycleCarried
	ok, err := s.Get(sectionLifecycle, &c)
	if err == nil && !ok {
		err = fmt.Errorf("no %s section", sectionLifecycle)
	}
	if err != nil {
		return nil, err
	}
	m.saveMu.Lock()
	m.sandbox = c.SandboxID
	m.saveMu.Unlock()
	m.mu.Lock()
	m.gen, m.lost, m.lostKernels, m.last, m.lastPause = c.Generation, c.Lost, c.LostKernels, c.LastResume, c.LastPause
	if c.ResumeAnswers != nil {
		m.answers, m.answerOrder = c.ResumeAnswers, c.ResumeOrder
	}
	if c.UpgradeAnswers != nil {
		m.upgradeAnswers, m.upgradeOrder = c.UpgradeAnswers, c.UpgradeOrder
	}
	m.upgrades, m.lastUpgrade = c.Upgrades, c.LastUpgrade
	m.mu.Unlock()
	if err := m.persistGeneration(c.Generation); err != nil {
		m.log.Warn("saving the generation taken over", zap.Error(err))
	}
	caller, err := s.Dup(fileUpgradeCaller)
	if err != nil {
		m.log.Warn("the host's connection did not cross: it gets no answer, a retry of its upgrade_id does", zap.Error(err))
	}
	return &Adopted{rec: c.Upgrade, adopted: time.Now(), caller: caller, failed: s.Failed()}, nil
}

// FinishUpgrade ends an adopted upgrade once the new agent serves: user
// work thaws, and the answer is recorded (health's last_upgrade, the
// upgrade_id's answer). It returns the answer and the host's connection
// to write it on (nil if there is none), which the caller closes.
func (m *Manager) FinishUpgrade(ad *Adopted) (UpgradeAnswer, *os.File) {
	seq := &steps{list: ad.rec.Steps}
	if n := len(seq.list); n > 0 && seq.list[n-1].Step == stepExec {
		seq.list[n-1] = Step{Step: stepExec, Status: StepDone, Ms: ms(ad.adopted.Sub(time.Unix(0, ad.rec.ExecUnixNs))),
			Detail: "the new binary runs in the same process"}
	}
	adopt := Step{Step: stepAdopt, Status: StepDone, Ms: ms(time.Since(ad.adopted)), Detail: "state taken over; serving"}
	if ad.failed != "" {
		adopt.Status, adopt.Detail = StepFailed, "the new agent handed back: "+ad.failed
	}
	seq.list = append(seq.list, adopt)
	var thawed time.Time
	if ad.rec.FrozenUnixNs != 0 {
		seq.run(stepThaw, m.thawUserWork)
		thawed = time.Now()
	}
	a := UpgradeAnswer{UpgradeID: ad.rec.ID, State: "upgraded", FromVersion: ad.rec.From, ToVersion: ad.rec.To, Format: ad.rec.Format,
		Steps: seq.snapshot(), AtUnixMs: ad.rec.StartedUnixNs / 1e6, DurationMs: ms(time.Since(time.Unix(0, ad.rec.StartedUnixNs)))}
	if !thawed.IsZero() {
		a.FrozenMs = ms(thawed.Sub(time.Unix(0, ad.rec.FrozenUnixNs)))
	}
	if ad.failed != "" {
		a.State, a.Error = "failed", "the new agent handed back: "+ad.failed
		m.rememberUpgrade(a, false)
		m.log.Warn("upgrade failed: the new agent handed back, this one serves on", zap.String("to", a.ToVersion), zap.String("why", ad.failed), zap.Any("steps", a.Steps))
		return a, ad.caller
	}
	m.rememberUpgrade(a, true)
	m.writeLifecycle()
	m.log.Info("upgraded", zap.String("from", a.FromVersion), zap.String("to", a.ToVersion), zap.Float64("duration_ms", a.DurationMs),
		zap.Float64("frozen_ms", a.FrozenMs), zap.Any("steps", a.Steps))
	return a, ad.caller
}
