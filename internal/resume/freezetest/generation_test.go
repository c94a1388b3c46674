package freezetest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// stateFile is what the agent keeps in its state directory.
type stateFile struct {
	Generation uint64   `json:"generation"`
	BootID     string   `json:"boot_id"`
	Kernels    []string `json:"kernels"`
}

func readState(t testing.TB, dir string) (stateFile, map[string]any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s stateFile
	var raw map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("state.json: %v: %s", err, b)
	}
	json.Unmarshal(b, &raw)
	return s, raw
}

// TestGenerationCountsResumes: resume_generation goes 0, 1, 2 over two
// pause cycles, as /health, the resume answers, the client's hello and
// the state file say; repeating a resume_id, even concurrently, answers
// the first answer again and bumps nothing.
func TestGenerationCountsResumes(t *testing.T) {
	t.Parallel()
	a := startAgent(t, agentConfig{})
	c, rc := dialCounted(t, a)
	host := client.Host{URL: a.url, Token: testToken}
	if h := a.health(t); h.ResumeGeneration != 0 || h.LastResume != nil || c.Generation() != 0 {
		t.Fatalf("fresh agent: %+v, client generation %d", h, c.Generation())
	}

	h := pauseAndResume(t, a, c, rc, "cycle-1", nil)
	if h.ResumeGeneration != 1 || h.LastResume == nil || h.LastResume.Source != "host" || h.LastResume.ResumeID != "cycle-1" {
		t.Fatalf("first resume: %+v (last %+v)", h, h.LastResume)
	}
	if h, err := host.Resume(ctxLong(t), client.ResumeOptions{ResumeID: "cycle-1"}); err != nil || h.ResumeGeneration != 1 {
		t.Fatalf("retried cycle-1: %+v, %v", h, err)
	}
	if h := a.health(t); h.ResumeGeneration != 1 {
		t.Fatalf("a retry bumped the generation: %+v", h)
	}

	// The second cycle's host sends its resume three times at once, as
	// retries after a timeout would.
	a.pause(t)
	time.Sleep(pauseFor)
	a.unpause(t)
	var wg sync.WaitGroup
	answers := make([]client.Health, 3)
	errs := make([]error, 3)
	for i := range answers {
		wg.Go(func() { answers[i], errs[i] = host.Resume(ctxLong(t), client.ResumeOptions{ResumeID: "cycle-2"}) })
	}
	wg.Wait()
	for i := range answers {
		if errs[i] != nil || answers[i].ResumeGeneration != 2 {
			t.Fatalf("concurrent resume %d of cycle-2: %+v, %v", i, answers[i], errs[i])
		}
	}
	rc.wait(t, 2)
	for id, want := range map[string]uint64{"cycle-1": 1, "cycle-2": 2} {
		if h, err := host.Resume(ctxLong(t), client.ResumeOptions{ResumeID: id}); err != nil || h.ResumeGeneration != want {
			t.Fatalf("retried %s: %+v, %v; want its first answer, generation %d", id, h, err, want)
		}
	}
	if h := a.health(t); h.ResumeGeneration != 2 || h.LastResume.ResumeID != "cycle-2" || c.Generation() != 2 {
		t.Fatalf("after two cycles: %+v (last %+v), client generation %d", h, h.LastResume, c.Generation())
	}
	if s, _ := readState(t, a.stateDir); s.Generation != 2 {
		t.Fatalf("state file has generation %d, want 2", s.Generation)
	}
	_, metrics := a.request(t, "GET", "/metrics", testToken, "")
	if !strings.Contains(string(metrics), "\nrayito_resume_generation 2\n") {
		t.Fatalf("metrics do not show generation 2:\n%s", metrics)
	}
	// The client works on the connection it got back.
	if _, err := c.List(ctxLong(t), ""); err != nil {
		t.Fatal(err)
	}
}
