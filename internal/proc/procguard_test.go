package proc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// fakeLeaf makes leaf name under work with the given processes (pids, as
// cgroup.procs lists them) and an empty cgroup.kill.
func fakeLeaf(t *testing.T, work, name string, pids []int) string {
	t.Helper()
	dir := filepath.Join(work, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var procs strings.Builder
	for _, p := range pids {
		fmt.Fprintln(&procs, p)
	}
	for f, v := range map[string]string{"cgroup.procs": procs.String(), "cgroup.kill": ""} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func seq(from, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = from + i
	}
	return s
}

// TestProcessGuardKillsOnlyRunaways: the guard kills a command with more
// processes than its maximum, and no other: not one at the maximum or
// under it, not a directory that is no command's leaf. The killed leaf's
// process ends saying why.
func TestProcessGuardKillsOnlyRunaways(t *testing.T) {
	work := t.TempDir()
	l := &leaves{dir: work, fd: -1, byPid: map[int]string{}, pending: map[string]struct{}{}, killed: map[string]string{}}
	c := &Cgroups{user: filepath.Dir(work), leaves: l}
	bomb := fakeLeaf(t, work, "p-1", seq(1000, 70))
	atMax := fakeLeaf(t, work, "p-2", seq(2000, 64))
	few := fakeLeaf(t, work, "p-3", seq(3000, 3))
	other := fakeLeaf(t, work, "not-a-leaf", seq(4000, 70))
	l.started(1000, "p-1")
	p := &processGuard{c: c, g: ProcessGuard{Max: 64}, log: zap.NewNop()}
	p.sweep()
	for dir, want := range map[string]string{bomb: "1", atMax: "", few: "", other: ""} {
		if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.kill")); string(b) != want {
			t.Errorf("%s: cgroup.kill %q, want %q", filepath.Base(dir), b, want)
		}
	}
	if c.runawayKills.Load() != 1 {
		t.Errorf("runaway kills %d, want 1", c.runawayKills.Load())
	}
	why := l.ended(1000)
	if !strings.Contains(why, "70 processes, more than 64") {
		t.Errorf("the killed command's end says %q", why)
	}
	if st := ExitEnd(Status{Wait: unix.WaitStatus(unix.SIGKILL), KilledBy: why}); st.Message != why || st.Signal != "SIGKILL" {
		t.Errorf("end %+v", st)
	}
}

func TestParseProcessGuard(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		ok   bool
	}{{"off", 0, true}, {"512", 512, true}, {"64", 64, true}, {"63", 0, false}, {"-1", 0, false}, {"many", 0, false}, {"", 0, false}} {
		g, err := ParseProcessGuard(c.in)
		if (err == nil) != c.ok || (c.ok && g.Max != c.want) {
			t.Errorf("%q: %+v, %v", c.in, g, err)
		}
		if c.ok && g.String() != c.in {
			t.Errorf("%q reads back as %q", c.in, g.String())
		}
	}
}

// TestKillCgroupWithoutCgroupKill: on a kernel without cgroup.kill the
// processes listed are killed until none is left.
func TestKillCgroupWithoutCgroupKill(t *testing.T) {
	dir := t.TempDir()
	var pids []int
	done := make(chan struct{}, 3)
	for range 3 {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, cmd.Process.Pid)
		go func() { cmd.Wait(); done <- struct{}{} }()
	}
	var procs strings.Builder
	for _, p := range pids {
		fmt.Fprintln(&procs, p)
	}
	os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(procs.String()), 0o644)
	if err := killCgroup(dir); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("a process listed in the cgroup still runs")
		}
	}
}
