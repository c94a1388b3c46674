package resume

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func stepsLine(ss []Step) string {
	var b []string
	for _, s := range ss {
		b = append(b, s.Step+"="+string(s.Status))
	}
	return strings.Join(b, " ")
}

// TestResumeReportsItsSteps: last_resume lists the sequence's steps in
// their order, each done or skipped with why, and a failing part (the
// clock, without CAP_SYS_TIME) is a failed step with its error while the
// steps after it still run.
func TestResumeReportsItsSteps(t *testing.T) {
	j := &journal{}
	m := journaled(j, false, Options{})
	if _, err := m.Pause(context.Background(), pauseReq()); err != nil {
		t.Fatal(err)
	}
	st := m.Resume(context.Background(), Report{Source: SourceHost, TimeUnixNs: time.Now().UnixNano(), SandboxID: "sb-1"})
	want := "rebaseline=skipped clock=done rekey=done stale_connections=skipped network=skipped thaw=done kernel_check=done " +
		"kernel_reseed=skipped sandbox=done hooks=skipped publish=done notify=done cut=done traffic=skipped"
	if got := stepsLine(st.LastResume.Steps); got != want {
		t.Fatalf("steps\n got %s\nwant %s", got, want)
	}
	for _, s := range st.LastResume.Steps {
		if s.Detail == "" {
			t.Errorf("step %s says nothing", s.Step)
		}
	}
	if s := st.LastResume.Steps[8]; s.Detail != "a new sandbox: sb-1" {
		t.Errorf("sandbox step: %+v", s)
	}
	if s := st.LastResume.Steps[10]; s.Detail != "generation 1" {
		t.Errorf("publish step: %+v", s)
	}

	// Without a pause nothing thaws and no client is told; a clock that
	// cannot be set fails its step, and the rest still runs.
	m.o.SetClock = func(time.Time) error { return errors.New("operation not permitted") }
	st = m.Resume(context.Background(), Report{Source: SourceHost, TimeUnixNs: time.Now().UnixNano(), SandboxID: "sb-1"})
	want = "rebaseline=skipped clock=failed rekey=done stale_connections=skipped network=skipped thaw=skipped kernel_check=done " +
		"kernel_reseed=skipped sandbox=done hooks=skipped publish=done notify=skipped cut=done traffic=skipped"
	if got := stepsLine(st.LastResume.Steps); got != want {
		t.Fatalf("steps without a pause\n got %s\nwant %s", got, want)
	}
	if s := st.LastResume.Steps[1]; !strings.Contains(s.Detail, "operation not permitted") {
		t.Errorf("clock step: %+v", s)
	}
	if s := st.LastResume.Steps[8]; s.Detail != "still sb-1" {
		t.Errorf("sandbox step: %+v", s)
	}
	if st.Generation != 2 {
		t.Fatalf("generation %d, want 2", st.Generation)
	}
}

// TestLateReportAddsItsSteps: the host's report after a guest detector's
// is the same resume, and what it brought (time, entropy, a new sandbox)
// is run and listed in late_steps; a guest detector's late report brings
// nothing and adds nothing.
func TestLateReportAddsItsSteps(t *testing.T) {
	j := &journal{}
	m := journaled(j, false, Options{})
	if st := m.Resume(context.Background(), Report{Source: SourceVMGenID}); st.Generation != 1 || st.LastResume.LateSteps != nil {
		t.Fatalf("detected: %+v", st)
	}
	if st := m.Resume(context.Background(), Report{Source: SourceClock}); st.LastResume.LateSteps != nil {
		t.Fatalf("a second guest detector's report added steps: %+v", st.LastResume.LateSteps)
	}
	st := m.Resume(context.Background(), Report{Source: SourceHost, TimeUnixNs: time.Now().UnixNano(), Entropy: make([]byte, 32), SandboxID: "sb-2"})
	if st.Generation != 1 {
		t.Fatalf("the host's late report: generation %d, want 1", st.Generation)
	}
	want := "clock=done rekey=done network=skipped sandbox=done stale_connections=skipped hooks=skipped"
	if got := stepsLine(st.LastResume.LateSteps); got != want {
		t.Fatalf("late steps\n got %s\nwant %s", got, want)
	}
	if !st.LastResume.NewSandbox || len(st.LastResume.Steps) != len(resumeSequence) {
		t.Fatalf("the late report's resume: %+v", st.LastResume)
	}
}
