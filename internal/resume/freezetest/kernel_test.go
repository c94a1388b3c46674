package freezetest

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/proc/proctest"

	"github.com/rayito/rayito-agent/client"
)

// kernelState returns a kernel's state in /health, "" if not listed.
func kernelState(h client.Health, id string) string {
	for _, k := range h.Kernels {
		if k.Kernel == id {
			return k.State
		}
	}
	return ""
}

// kernelPid finds a kernel's process through kernel_list.
func kernelPid(t testing.TB, c *client.Client, id string) int {
	t.Helper()
	ks, err := c.Kernels(ctxLong(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		if k.Kernel == id && k.Pid > 0 {
			return k.Pid
		}
	}
	t.Fatalf("kernel %s has no pid in %+v", id, ks)
	return 0
}

// execute runs code and fails the test unless it ended ok.
func execute(t testing.TB, ctx context.Context, k *client.Kernel, code string) *client.Execution {
	t.Helper()
	ex, err := k.Execute(ctx, code, client.ExecuteOptions{})
	if err != nil || ex.Status != client.StatusOK {
		t.Fatalf("execute %q on %q: %+v, %v", code, k.ID(), ex, err)
	}
	return ex
}

// TestKernelKilledDuringPause: the default kernel is killed while the VM
// is paused. The resume reports kernel_state_lost and the dead kernel;
// another kernel survives with its variables; the next execute on the
// default kernel runs on a replacement. The resume after that, with no
// kernel lost in between, reports none lost.
func TestKernelKilledDuringPause(t *testing.T) {
	t.Parallel()
	a := startAgent(t, agentConfig{})
	c, rc := dialCounted(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitLong)
	defer cancel()

	def := c.DefaultKernel()
	first := execute(t, ctx, def, "x = 42").Kernel
	other, err := c.StartKernel(ctx, client.KernelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	execute(t, ctx, other, "y = 7")
	pid := kernelPid(t, c, first)

	h := pauseAndResume(t, a, c, rc, "kill-1", func() {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("killing kernel %s (pid %d): %v", first, pid, err)
		}
	})
	if h.ResumeGeneration != 1 || !h.KernelStateLost {
		t.Fatalf("resume after a kernel was killed: %+v, want generation 1 and kernel_state_lost", h)
	}
	if s := kernelState(h, first); s != "dead" && s != "lost" {
		t.Fatalf("killed kernel %s is %q in %+v", first, s, h.Kernels)
	}
	if s := kernelState(h, other.ID()); s != "alive" {
		t.Fatalf("surviving kernel %s is %q in %+v", other.ID(), s, h.Kernels)
	}

	ex := execute(t, ctx, def, "print(40 + 2)")
	if ex.Kernel == first || ex.Kernel == "" || ex.Stdout != "42\n" {
		t.Fatalf("default kernel after the kill: ran on %q, stdout %q", ex.Kernel, ex.Stdout)
	}
	if !strings.Contains(ex.Stderr, first) {
		t.Fatalf("no note that the default kernel %s was replaced: stderr %q", first, ex.Stderr)
	}
	if ex, err := def.Execute(ctx, "x", client.ExecuteOptions{}); err != nil || ex.Error == nil || ex.Error.Name != "NameError" {
		t.Fatalf("the replacement knows x: %+v, %v", ex, err)
	}
	if got := execute(t, ctx, other, "y").Text(); got != "7" {
		t.Fatalf("the surviving kernel lost y: %q", got)
	}
	if _, err := c.Kernel(first).Execute(ctx, "1", client.ExecuteOptions{}); !client.HasCode(err, client.CodeConflict) {
		t.Fatalf("execute on the dead kernel %s: %v, want conflict", first, err)
	}

	// kernel_state_lost describes the latest resume only.
	h = pauseAndResume(t, a, c, rc, "calm-2", nil)
	if h.ResumeGeneration != 2 || h.KernelStateLost {
		t.Fatalf("resume with every kernel alive: %+v", h)
	}
	if got := execute(t, ctx, def, "print('still', 1)").Stdout; got != "still 1\n" {
		t.Fatalf("default kernel after the second resume: %q", got)
	}
}

// TestHungKernelAtResume: a kernel that cannot answer (stopped, its
// process alive) costs the resume the --kernel-check-timeout bound, no
// more, and is reported slow, never lost: kernel_state_lost stays false.
// Once it runs again, the next cell runs on it: its variables are kept and
// the default kernel is not replaced.
func TestHungKernelAtResume(t *testing.T) {
	t.Parallel()
	const bound = 2 * time.Second
	a := startAgent(t, agentConfig{Args: []string{"--kernel-check-timeout", bound.String()}})
	c, rc := dialCounted(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitLong)
	defer cancel()

	def := c.DefaultKernel()
	first := execute(t, ctx, def, "x = 42").Kernel
	pid := kernelPid(t, c, first)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	waitStopped(t, pid)
	defer func() {
		if stopped {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	h, err := c.Resume(ctx, client.ResumeOptions{ResumeID: "hung-1"})
	if err != nil {
		t.Fatal(err)
	}
	if h.ResumeGeneration != 1 || h.KernelStateLost || kernelState(h, first) != "slow" {
		t.Fatalf("resume with a stopped kernel: %+v, want generation 1 and %s slow, no kernel state lost", h, first)
	}
	// A stopped kernel never answers, so the check waits the whole bound:
	// at least the flag's value, and nowhere near the old 6 s on top.
	if d := time.Duration(h.LastResume.DurationMs) * time.Millisecond; d < bound || d > bound+3*time.Second {
		t.Fatalf("the resume took %v with a %v kernel check bound", d, bound)
	}
	rc.wait(t, h.ResumeGeneration)

	syscall.Kill(pid, syscall.SIGCONT)
	stopped = false
	ex := execute(t, ctx, def, "x")
	if ex.Kernel != first || ex.Text() != "42" || ex.Stderr != "" {
		t.Fatalf("default kernel after it answered again: ran on %q (want %s), x = %q, stderr %q", ex.Kernel, first, ex.Text(), ex.Stderr)
	}
	if s := kernelState(a.health(t), first); s != "alive" {
		t.Fatalf("kernel %s is %q after it ran a cell", first, s)
	}
}

// waitStopped waits until every thread of pid is stopped: a stop signal
// is delivered when each thread next runs, and a thread that runs first
// could still answer the check.
func waitStopped(t testing.TB, pid int) {
	t.Helper()
	eventually(t, fmt.Sprintf("every thread of %d stopped", pid), func() bool {
		return proctest.Stopped(pid)
	})
}
