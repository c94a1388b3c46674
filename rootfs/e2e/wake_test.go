package e2e

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// TestCallThatWakesTheSandbox is the seeds' example under auto-resume: x =
// 42 in a kernel; the VM is paused (snapshotted); a client sends
// run_code("x") on its connection from before the pause while the VM is
// still paused, as the call that wakes an auto-suspended sandbox does;
// the VM resumes, the agent notices by itself and cuts that connection,
// and the host reports the resume. The call returns 42 without an error,
// and ran once: the kernel's In grew by one.
func TestCallThatWakesTheSandbox(t *testing.T) {
	tv := vmConfig(t)
	v := bootHealthy(t, tv.cfg)
	ctx, cancel := context.WithTimeout(context.Background(), restoreTimeout+5*time.Minute)
	defer cancel()
	c := dial(t, ctx, v.AgentURL(), tv.token, client.Options{ReconnectTimeout: restoreTimeout + stoppedFor + time.Minute})
	k := c.DefaultKernel()
	if ex, err := k.Execute(ctx, "x = 42", client.ExecuteOptions{}); err != nil || ex.Status != cellOK {
		t.Fatalf("x = 42: %+v, %v", ex, err)
	}
	cells := func() int {
		t.Helper()
		ex, err := k.Execute(ctx, "len(In)", client.ExecuteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(ex.Text())
		if err != nil {
			t.Fatalf("len(In): %+v", ex)
		}
		return n
	}
	before := cells()

	stopped := snapshot(t, v, t.TempDir())
	type answer struct {
		ex  *client.Execution
		err error
	}
	woke := make(chan answer, 1)
	go func() {
		ex, err := k.Execute(ctx, "x", client.ExecuteOptions{})
		woke <- answer{ex, err}
	}()
	// Paused past the guest's clock-jump threshold: it notices the
	// resume by itself and cuts the connection the call is on.
	time.Sleep(time.Until(stopped.Add(stoppedFor)))
	if err := v.Resume(ctx); err != nil {
		t.Fatalf("resume the VM: %v", err)
	}
	if h, err := c.Resume(ctx, client.ResumeOptions{ResumeID: "wake-1", TimeUnixNs: time.Now().UnixNano()}); err != nil || h.ResumeGeneration != 1 {
		t.Errorf("POST /v1/resume: generation %d, %v; want 1", h.ResumeGeneration, err)
	}
	a := <-woke
	if a.err != nil || a.ex.Text() != "42" {
		t.Fatalf("the call sent while the VM was paused: %+v, %v; want 42", a.ex, a.err)
	}
	// len(In) counts the cell asking too: one more than before, and the
	// call's own cell.
	if after := cells(); after != before+2 {
		t.Fatalf("In has %d cells after the call, %d before it: it ran %d times", after, before, after-before-1)
	}
	if gen := c.Generation(); gen != 1 {
		t.Errorf("the client is at generation %d, want 1", gen)
	}
	// The image has what an E2B user's first chart needs.
	if ex, err := k.Execute(ctx, "import matplotlib.pyplot", client.ExecuteOptions{}); err != nil || ex.Status != cellOK {
		t.Errorf("import matplotlib.pyplot in the image: %+v, %v", ex, err)
	}
}
