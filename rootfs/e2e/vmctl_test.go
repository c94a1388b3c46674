package e2e

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/rootfs/vm"
)

// buildRunner builds the runner behind make vm into the test's directory.
func buildRunner(t *testing.T) string {
	t.Helper()
	runner := filepath.Join(t.TempDir(), "vmrun")
	if out, err := exec.Command("go", "build", "-o", runner, "../vm/cmd/vmrun").CombinedOutput(); err != nil {
		t.Fatalf("build the runner: %v\n%s", err, out)
	}
	return runner
}

// runnerAccel is the -accel a runner started by a test gets: what this
// process learned of KVM, so that the runner does not probe it again.
func runnerAccel() string {
	if a := vm.KnownAccel(); a != vm.AccelAuto {
		return string(a)
	}
	return "auto"
}

// TestVMRunnerControl: a person's pause, snapshot, restore and resume of
// the VM make vm runs (make vm-pause, vm-snapshot, ...) do what a host
// does: a restore brings the snapshot back on the same address, the agent
// is told, and it reports one resume.
func TestVMRunnerControl(t *testing.T) {
	tv := vmConfig(t)
	runner := buildRunner(t)
	ctl := filepath.Join(t.TempDir(), "vmrun.sock")
	snap := filepath.Join(t.TempDir(), "snap")
	cmd := exec.Command(runner, "-build", buildDir(t), "-image", tv.cfg.Image, "-dir", t.TempDir(), "-ctl", ctl, "-accel", runnerAccel())
	cmd.Env = append(os.Environ(), "RAYITO_ACCESS_TOKEN="+tv.token)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			if !sent && strings.HasPrefix(sc.Text(), "agent: ") {
				ready <- true
				sent = true
			}
		}
		if !sent {
			ready <- false
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("the runner ended before its agent was healthy")
		}
	case <-time.After(bootTimeout):
		t.Fatal("the runner's agent was not healthy in time")
	}
	do := func(want string, args ...string) {
		t.Helper()
		b, err := exec.Command(runner, append([]string{"-ctl", ctl}, args...)...).CombinedOutput()
		if err != nil || !strings.Contains(string(b), want) {
			t.Fatalf("vmrun %s: %v: %s (want %q)", strings.Join(args, " "), err, b, want)
		}
		t.Logf("vmrun %s: %s", strings.Join(args, " "), strings.TrimSpace(string(b)))
	}
	do("running, generation 0", "status")
	do("paused", "pause")
	do("generation 1,", "resume") // the host's report of a pause the guest did not notice
	do("snapshot in "+snap, "snapshot", snap)
	do("paused", "status")
	do("generation 2,", "restore", snap) // the snapshot's agent was at 1
	do("running, generation 2", "status")
	do("generation 2,", "restore", snap) // again, from the same snapshot
	if b, err := exec.Command(runner, "-ctl", ctl, "restore", filepath.Join(t.TempDir(), "none")).CombinedOutput(); err == nil || !strings.Contains(string(b), "no snapshot in") {
		t.Fatalf("restore of nothing: %v: %s", err, b)
	}
	do("running, generation 2", "status")
}

// TestDemo: make demo runs the product's example end to end and says so.
func TestDemo(t *testing.T) {
	tv := vmConfig(t)
	runner := buildRunner(t)
	cmd := exec.Command(runner, "-build", buildDir(t), "-image", tv.cfg.Image, "-dir", t.TempDir(), "-accel", runnerAccel(), "demo")
	cmd.Env = append(os.Environ(), "RAYITO_ACCESS_TOKEN="+tv.token)
	b, err := cmd.CombinedOutput()
	t.Logf("make demo:\n%s", b)
	if err != nil {
		t.Fatalf("the demo failed: %v", err)
	}
	for _, want := range []string{`run_code("x") after the restore: 42`, "no gap, no line twice", "resume_generation 1, kernel_state_lost false"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the demo did not say %q", want)
		}
	}
}
