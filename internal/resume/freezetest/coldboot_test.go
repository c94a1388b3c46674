package freezetest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rayito/rayito-agent/client"
)

// TestColdBootReportsLostKernels: the VM is switched off with kernels
// running and booted cold on the same disk (simulated by giving the state
// file another boot id). The new agent bumps the generation once and
// reports the kernels that existed as lost; execute works on a new
// kernel. Restarting the agent again within the same boot bumps nothing.
func TestColdBootReportsLostKernels(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitLong)
	defer cancel()
	stateDir := filepath.Join(t.TempDir(), "state")
	a := startAgent(t, agentConfig{StateDir: stateDir})
	c := a.dial(t, client.Options{DisableReconnect: true})
	def := execute(t, ctx, c.DefaultKernel(), "x = 1").Kernel
	other, err := c.StartKernel(ctx, client.KernelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := c.Resume(ctx, client.ResumeOptions{}); err != nil || h.ResumeGeneration != 1 || h.KernelStateLost {
		t.Fatalf("resume before the power cut: %+v, %v", h, err)
	}
	before, raw := readState(t, stateDir)
	existed := []string{def, other.ID()}
	if before.Generation != 1 || !sameSet(before.Kernels, existed) || before.BootID == "" {
		t.Fatalf("state before the power cut: %+v, want generation 1 and kernels %v", before, existed)
	}

	a.powerOff(t)
	const otherBoot = "00000000-0000-4000-8000-000000000000"
	raw["boot_id"] = otherBoot
	b, _ := json.Marshal(raw)
	if err := os.WriteFile(filepath.Join(stateDir, "state.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}

	a2 := startAgent(t, agentConfig{StateDir: stateDir})
	h := a2.health(t)
	if h.ResumeGeneration != 2 || !h.KernelStateLost || h.LastResume == nil || h.LastResume.Source != "boot" {
		t.Fatalf("after a cold boot: %+v (last %+v), want generation 2, kernel_state_lost, source boot", h, h.LastResume)
	}
	for _, id := range existed {
		if s := kernelState(h, id); s != "lost" {
			t.Fatalf("kernel %s is %q after a cold boot, want lost: %+v", id, s, h.Kernels)
		}
	}
	c2 := a2.dial(t, client.Options{})
	if c2.Generation() != 2 {
		t.Fatalf("hello says generation %d, want 2", c2.Generation())
	}
	ex := execute(t, ctx, c2.DefaultKernel(), "print(x if 'x' in dir() else 'fresh')")
	if ex.Stdout != "fresh\n" {
		t.Fatalf("a new kernel after the cold boot: %+v", ex)
	}
	if slices.Contains(existed, ex.Kernel) {
		t.Errorf("the new default kernel reuses the id %s of a kernel reported lost: %+v", ex.Kernel, a2.health(t).Kernels)
	}
	if s, _ := readState(t, stateDir); s.Generation != 2 || s.BootID != before.BootID {
		t.Fatalf("state after the cold boot: %+v, want generation 2 and this boot's id %s", s, before.BootID)
	}

	// The agent restarts within the same boot: no new resume.
	a2.powerOff(t)
	a3 := startAgent(t, agentConfig{StateDir: stateDir})
	if h := a3.health(t); h.ResumeGeneration != 2 || (h.LastResume != nil && h.LastResume.Source == "boot") {
		t.Fatalf("an agent restart within one boot counted as a resume: %+v (last %+v)", h, h.LastResume)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
