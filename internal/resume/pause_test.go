package resume

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// journal records, in order, what the sequence asked of each part: the
// parts below stand for the endpoint, the user cgroup, the clock, the
// CRNG and the kernels, so the order of the steps can be read back.
type journal struct {
	mu      sync.Mutex
	entries []string
}

func (j *journal) add(s string) {
	j.mu.Lock()
	j.entries = append(j.entries, s)
	j.mu.Unlock()
}

func (j *journal) String() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return strings.Join(j.entries, ",")
}

type journalClients struct {
	j *journal
	// hold, if set, keeps Suspending until ctx ends: a slow client.
	hold bool
}

func (c journalClients) Suspending(ctx context.Context, gen uint64) int {
	c.j.add("notify")
	if c.hold {
		<-ctx.Done()
	}
	return 1
}

func (c journalClients) Resumed(gen uint64, aborted bool) {
	if aborted {
		c.j.add("resumed-aborted")
	} else {
		c.j.add("resumed")
	}
}

type journalUserWork struct{ j *journal }

func (u journalUserWork) Freeze(ctx context.Context) (string, error) {
	u.j.add("freeze")
	return "user work frozen", nil
}
func (u journalUserWork) Thaw() error { u.j.add("thaw"); return nil }

type journalCRNG struct{ j *journal }

func (c journalCRNG) Rekey(host []byte) ([]string, error) {
	c.j.add("rekey")
	return []string{"time"}, nil
}
func (c journalCRNG) Unable() error { return nil }

type journalKernels struct{ j *journal }

func (k journalKernels) Check(ctx context.Context) []KernelHealth { k.j.add("check"); return nil }
func (k journalKernels) List() []KernelHealth                     { return nil }

type journalCuts struct{ j *journal }

func (c journalCuts) CutForResume(ctx context.Context, gen uint64) { c.j.add("cut") }

// journaled is a Manager over journaling parts; hold makes the clients
// slow to take the pause's notice.
func journaled(j *journal, hold bool, o Options) *Manager {
	o.Clients = journalClients{j: j, hold: hold}
	o.UserWork = journalUserWork{j}
	o.CRNG = journalCRNG{j}
	o.Reseed = true
	o.Kernels = journalKernels{j}
	o.Sessions = journalCuts{j}
	o.SetClock = func(time.Time) error { j.add("clock"); return nil }
	m, err := New(o)
	if err != nil {
		panic(err)
	}
	return m
}

func pauseReq() PauseRequest {
	return PauseRequest{Mode: ModeMemory, Shrink: ShrinkNone, Deadline: time.Minute, ThawAfter: time.Hour}
}

// TestPauseAndResumeOrder: a pause tells clients before it freezes user
// work; the resume sets the clock and re-keys the CRNG while user work is
// still frozen, thaws it before the kernel check (which needs the kernels
// running), and cuts connections last.
func TestPauseAndResumeOrder(t *testing.T) {
	j := &journal{}
	m := journaled(j, false, Options{})
	a, err := m.Pause(context.Background(), pauseReq())
	if err != nil || a.State != "paused" {
		t.Fatalf("pause: %+v, %v", a, err)
	}
	if got := j.String(); got != "notify,freeze" {
		t.Fatalf("pause did %s, want notify,freeze", got)
	}
	st := m.Resume(context.Background(), Report{Source: SourceHost, TimeUnixNs: time.Now().UnixNano()})
	want := "notify,freeze,clock,rekey,thaw,check,resumed,cut"
	if got := j.String(); got != want {
		t.Fatalf("pause and resume did %s, want %s", got, want)
	}
	if st.Generation != 1 || st.Pause != nil || st.LastPause == nil || st.LastPause.Ended != "resume" || st.LastResume.PausedMs == nil {
		t.Fatalf("state after the resume: %+v", st)
	}
}

// TestResumeOvertakesPause: a resume that comes while the pause is still
// quiescing (a client slow to take its notice) stops it: the steps not
// started say so, and nothing stays frozen or paused.
func TestResumeOvertakesPause(t *testing.T) {
	j := &journal{}
	m := journaled(j, true, Options{})
	answered := make(chan PauseAnswer, 1)
	go func() {
		a, _ := m.Pause(context.Background(), pauseReq())
		answered <- a
	}()
	for m.Paused() == nil || !strings.Contains(j.String(), "notify") {
		time.Sleep(time.Millisecond)
	}
	st := m.Resume(context.Background(), Report{Source: SourceHost})
	a := <-answered
	if st.Generation != 1 || st.Pause != nil || m.Paused() != nil {
		t.Fatalf("after the resume: %+v, paused %+v", st, m.Paused())
	}
	if s, ok := stepOf(a, stepFreeze); !ok || s.Status != StepNotStarted || !strings.Contains(s.Detail, "resume or abort came first") {
		t.Errorf("freeze in the overtaken pause: %+v", a.Steps)
	}
	if strings.Contains(j.String(), "freeze") || strings.Contains(j.String(), "thaw") {
		t.Errorf("an overtaken pause froze or thawed: %s", j)
	}
}

// TestLateDetectionOfTheLastResumeKeepsThePause: the guest's clock
// detector notices a restore a tick after the host reported it; its
// report runs late, when the host's next pause is already in place. That
// detection is the resume handled before the pause, not a restore after
// it: the pause stays and the generation with it. A detection noticed
// after the pause ends it as a new resume, and one noticed before the
// pause that no handled resume claims (a restore nobody reported) ends it
// too.
func TestLateDetectionOfTheLastResumeKeepsThePause(t *testing.T) {
	j := &journal{}
	m := journaled(j, false, Options{})
	if st := m.Resume(context.Background(), Report{Source: SourceHost}); st.Generation != 1 {
		t.Fatalf("host resume: %+v", st)
	}
	noticed := time.Now()
	time.Sleep(time.Millisecond) // noticed strictly before the pause, on any clock
	if a, err := m.Pause(context.Background(), pauseReq()); err != nil || a.State != "paused" {
		t.Fatalf("pause: %+v, %v", a, err)
	}
	st := m.Resume(context.Background(), Report{Source: SourceClock, NoticedAt: noticed})
	if st.Generation != 1 || st.Pause == nil || st.Pause.State != "paused" || m.Paused() == nil {
		t.Fatalf("a detection of the resume before the pause ended it or bumped: %+v", st)
	}
	if got := j.String(); strings.Count(got, "thaw") != 0 || strings.Count(got, "freeze") != 1 {
		t.Fatalf("after the late detection the parts did %s", got)
	}
	time.Sleep(time.Millisecond)
	st = m.Resume(context.Background(), Report{Source: SourceClock, NoticedAt: time.Now()})
	if st.Generation != 2 || st.Pause != nil || st.LastPause == nil || st.LastPause.Ended != "resume" {
		t.Fatalf("a detection after the pause: %+v", st)
	}

	// A fresh agent: no resume handled, so a detection before the pause
	// is a restore of its own.
	j = &journal{}
	m = journaled(j, false, Options{})
	noticed = time.Now()
	time.Sleep(time.Millisecond)
	if _, err := m.Pause(context.Background(), pauseReq()); err != nil {
		t.Fatal(err)
	}
	st = m.Resume(context.Background(), Report{Source: SourceClock, NoticedAt: noticed})
	if st.Generation != 1 || st.Pause != nil || !strings.Contains(j.String(), "thaw") {
		t.Fatalf("an unclaimed detection before the pause: %+v, parts did %s", st, j)
	}
}

// TestPauseDeadline: past its deadline the pause answers with what it
// finished; the step still running says so and ends in the background.
func TestPauseDeadline(t *testing.T) {
	j := &journal{}
	m := journaled(j, true, Options{})
	req := pauseReq()
	req.Deadline = 50 * time.Millisecond
	a, err := m.Pause(context.Background(), req)
	if err != nil || !a.DeadlinePassed {
		t.Fatalf("past the deadline: %+v, %v", a, err)
	}
	// The slow client held notify past the deadline: the freeze after it
	// does not start (the host freezes the VM right after the answer).
	for m.Paused().State != "paused" {
		time.Sleep(time.Millisecond)
	}
	if s, _ := stepOf(*m.Paused(), stepFreeze); s.Status != StepNotStarted || s.Detail != "past the deadline" {
		t.Errorf("freeze after the deadline: %+v", s)
	}
	if _, err := m.Abort(); err != nil {
		t.Fatal(err)
	}
}

// TestAutoThawAsksTheDetectorsFirst: when thaw_after runs out, a detector
// that sees a restore leaves the pause to its resume (which thaws late);
// one that sees nothing lets the agent thaw as an abort.
func TestAutoThawAsksTheDetectorsFirst(t *testing.T) {
	for _, restored := range []bool{true, false} {
		j := &journal{}
		var m *Manager
		m = journaled(j, false, Options{Machine: Machine{Detect: func() bool {
			if restored {
				go m.Resume(context.Background(), Report{Source: SourceClock})
			}
			return restored
		}}})
		req := pauseReq()
		req.ThawAfter = 20 * time.Millisecond
		if _, err := m.Pause(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		for m.Paused() != nil || m.State().LastPause == nil {
			time.Sleep(time.Millisecond)
		}
		st := m.State()
		want, ended, gen := "notify,freeze,rekey,thaw,check,resumed,cut", "resume", uint64(1)
		if !restored {
			want, ended, gen = "notify,freeze,thaw,resumed-aborted", "auto_thaw", 0
		}
		// The resume's last steps run after last_pause is set.
		for j.String() != want && len(j.String()) < len(want) {
			time.Sleep(time.Millisecond)
		}
		if got := j.String(); got != want || st.LastPause.Ended != ended || m.Generation() != gen {
			t.Errorf("restored %v: did %s (want %s), ended %s, generation %d", restored, got, want, st.LastPause.Ended, m.Generation())
		}
	}
}

// TestPauseConflictsAndAbort: a pause with the same parameters shares the
// one in place, with others is ErrPauseConflict; abort without a pause is
// ErrNotPaused, and an abort keeps the generation.
func TestPauseConflictsAndAbort(t *testing.T) {
	j := &journal{}
	m := journaled(j, false, Options{})
	if _, err := m.Abort(); !errors.Is(err, ErrNotPaused) {
		t.Fatalf("abort without a pause: %v", err)
	}
	first, _ := m.Pause(context.Background(), pauseReq())
	again, err := m.Pause(context.Background(), pauseReq())
	if err != nil || again.AtUnixMs != first.AtUnixMs || strings.Count(j.String(), "freeze") != 1 {
		t.Fatalf("a repeated pause: %+v, %v; did %s", again, err, j)
	}
	for _, change := range []func(*PauseRequest){
		func(r *PauseRequest) { r.Shrink = ShrinkAll },
		func(r *PauseRequest) { r.Mode = ModeFilesystem },
		func(r *PauseRequest) { r.ThawAfter = 5 * time.Second },
		func(r *PauseRequest) { r.Deadline = 5 * time.Second },
	} {
		other := pauseReq()
		change(&other)
		if _, err := m.Pause(context.Background(), other); !errors.Is(err, ErrPauseConflict) {
			t.Fatalf("a pause with other parameters (%+v): %v", other, err)
		}
	}
	if p := m.Paused(); p == nil || p.ThawAfterMs != pauseReq().ThawAfter.Milliseconds() {
		t.Fatalf("the pause in place after the conflicts: %+v", p)
	}
	a, err := m.Abort()
	if err != nil || a.Generation != 0 || len(a.Thaw) != 1 || m.Paused() != nil {
		t.Fatalf("abort: %+v, %v", a, err)
	}
	if got := j.String(); got != "notify,freeze,thaw,resumed-aborted" {
		t.Fatalf("abort did %s", got)
	}
}

func stepOf(a PauseAnswer, name string) (Step, bool) {
	for _, s := range a.Steps {
		if s.Step == name {
			return s, true
		}
	}
	return Step{}, false
}
