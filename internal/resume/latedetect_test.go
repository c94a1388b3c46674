package resume

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestLateDetectionIsClaimedOnce: a late detection of the last resume,
// from one source, is claimed by that resume once. The same source
// reporting again is a restore of its own, though its notice is dated
// before the pause: it gets a new generation and ends the pause.
func TestLateDetectionIsClaimedOnce(t *testing.T) {
	j := &journal{}
	m := journaled(j, false, Options{})
	if st := m.Resume(context.Background(), Report{Source: SourceHost}); st.Generation != 1 {
		t.Fatalf("host resume: %+v", st)
	}
	noticed := time.Now()
	time.Sleep(time.Millisecond)
	if a, err := m.Pause(context.Background(), pauseReq()); err != nil || a.State != "paused" {
		t.Fatalf("pause: %+v, %v", a, err)
	}
	if st := m.Resume(context.Background(), Report{Source: SourceClock, NoticedAt: noticed}); st.Generation != 1 || st.Pause == nil {
		t.Fatalf("the late detection of the host's resume: %+v", st)
	}
	st := m.Resume(context.Background(), Report{Source: SourceClock, NoticedAt: noticed.Add(time.Microsecond)})
	if st.Generation != 2 || st.Pause != nil || st.LastPause == nil || st.LastPause.Ended != "resume" {
		t.Fatalf("a second detection from the source that was already claimed: %+v; want a resume of its own", st)
	}
	if got := j.String(); !strings.Contains(got, "thaw") || !strings.Contains(got, "rekey") {
		t.Fatalf("the second detection's resume did %s; want user work thawed and the CRNG re-keyed", got)
	}
}
