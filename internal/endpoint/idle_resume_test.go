package endpoint

import (
	"encoding/json"
	"testing"
	"time"
)

// TestResumeResetsIdle: right after a resume the sandbox is not idle: the
// host must not suspend a VM it just woke because it had been quiet
// before the snapshot.
func TestResumeResetsIdle(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	a.traffic.SetMaxIdle(60)
	traffic := func() (idleMs int64, idle bool) {
		status, b := a.get(t, "/v1/traffic")
		var tr struct {
			IdleMs int64 `json:"idle_ms"`
			Idle   bool  `json:"idle"`
		}
		if status != 200 || json.Unmarshal(b, &tr) != nil {
			t.Fatalf("/v1/traffic: %d %s", status, b)
		}
		return tr.IdleMs, tr.Idle
	}
	var before int64
	for before < 500 {
		time.Sleep(100 * time.Millisecond)
		before, _ = traffic()
	}
	if status, _ := a.post(t, "/v1/resume", testToken, `{"resume_id": "r1"}`); status != 200 {
		t.Fatalf("resume: %d", status)
	}
	if after, idle := traffic(); after >= before || idle {
		t.Fatalf("after the resume idle_ms is %d (before it %d), idle %v: the resume did not reset the idle clock", after, before, idle)
	}
}
