package resume

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Every lifecycle sequence (a pause's quiesce, its thaw, a resume, a later
// report of a resume already run) is an ordered list of named steps, each
// run by one runner that records its status, time and words: the pause's
// answer, last_pause's thaw and last_resume show those records, so a new
// step is one function and one row in its sequence's list.

// StepStatus is how far a step got.
type StepStatus string

const (
	StepDone    StepStatus = "done"
	StepSkipped StepStatus = "skipped"
	StepFailed  StepStatus = "failed"
	// StepRunning: still running when the answer was due (the deadline).
	StepRunning StepStatus = "running"
	// StepNotStarted: the deadline passed, or a resume or abort came,
	// before it.
	StepNotStarted StepStatus = "not_started"
)

// Step is one step of a sequence, as an answer reports it.
type Step struct {
	Step   string     `json:"step"`
	Status StepStatus `json:"status"`
	Ms     float64    `json:"ms"`
	Detail string     `json:"detail,omitempty"`
}

// stepFunc is one step's work: its words and its error, or skip with the
// reason it did nothing.
type stepFunc func() (detail string, skip bool, err error)

// steps records a sequence's steps as they run. A reader (a pause's
// answer at its deadline) may take a copy while one runs.
type steps struct {
	// ctx, once ended, leaves the steps after it not started (a pause's
	// deadline, or a resume that overtook it); nil runs every step.
	ctx  context.Context
	mu   sync.Mutex
	list []Step
}

// run runs f as the step name, unless the sequence's context has ended,
// and records it.
func (s *steps) run(name string, f stepFunc) Step {
	s.mu.Lock()
	if s.ctx != nil && s.ctx.Err() != nil {
		why := "past the deadline"
		if !errors.Is(context.Cause(s.ctx), context.DeadlineExceeded) {
			why = context.Cause(s.ctx).Error()
		}
		st := Step{Step: name, Status: StepNotStarted, Detail: why}
		s.list = append(s.list, st)
		s.mu.Unlock()
		return st
	}
	i := len(s.list)
	s.list = append(s.list, Step{Step: name, Status: StepRunning})
	s.mu.Unlock()
	start := time.Now()
	detail, skip, err := f()
	st := Step{Step: name, Status: StepDone, Ms: ms(time.Since(start)), Detail: detail}
	switch {
	case skip:
		st.Status = StepSkipped
	case err != nil:
		st.Status = StepFailed
		st.Detail = joinDetail(detail, err.Error())
	}
	s.mu.Lock()
	s.list[i] = st
	s.mu.Unlock()
	return st
}

// unbound runs every later step whatever the context: a sequence undoing
// what it did (a thaw) must not be cut short by the deadline that failed it.
func (s *steps) unbound() {
	s.mu.Lock()
	s.ctx = nil
	s.mu.Unlock()
}

// snapshot is a copy of the steps so far; never nil.
func (s *steps) snapshot() []Step {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Step{}, s.list...)
}

func joinDetail(a, b string) string {
	if a == "" {
		return b
	}
	return a + ": " + b
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
