package proc

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReaperAndOOMScore: a child, and what it forks at once, has an
// ordinary OOM score however the agent's own is set, and the agent keeps
// its own. The image gives the agent -1000, which takes CAP_SYS_RESOURCE
// to set (this test's machine may not have it); the shield does the same
// with any value, so the test shields itself with +500, which it may set
// and take back without the capability.
func TestReaperAndOOMScore(t *testing.T) {
	old, _ := os.ReadFile("/proc/self/oom_score_adj")
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("500"), 0); err != nil {
		t.Skipf("cannot set oom_score_adj here: %v", err)
	}
	defer os.WriteFile("/proc/self/oom_score_adj", old, 0)
	if newOOMShield() != nil {
		t.Fatal("a shield for an agent whose score is not below 0")
	}
	testManager(t) // starts the package's one reaper
	r := sharedReaper
	r.oom = openOOMShield(500)
	if r.oom == nil {
		t.Fatal("cannot open /proc/self/oom_score_adj")
	}
	defer func() { r.oom = nil }()
	// The agent descheduled right after the fork: the child and what it
	// forks at once must have their ordinary score from the start.
	r.oom.afterFork = func() { time.Sleep(300 * time.Millisecond) }
	out, st := runCaptured(t, r, "cat /proc/self/oom_score_adj; sh -c 'cat /proc/self/oom_score_adj'; exit 7")
	if out != "0\n0\n" {
		t.Fatalf("child and grandchild oom_score_adj %q, want 0 and 0", out)
	}
	if st.ExitCode() != 7 {
		t.Fatalf("status %+v", st)
	}
	if got := ownOOMScoreAdj(); got != 500 {
		t.Fatalf("the agent's own oom_score_adj is %d after the fork, want 500", got)
	}
	// A fork that fails (here its exec: no such program) gives the agent
	// its score back as well.
	if _, _, err := r.ForkExec("/nonexistent/program", []string{"x"}, &syscall.ProcAttr{}); err == nil {
		t.Fatal("ForkExec of a missing program succeeded")
	}
	if got := ownOOMScoreAdj(); got != 500 {
		t.Fatalf("the agent's own oom_score_adj is %d after a failed fork, want 500", got)
	}
	if err := r.Kill(st.Pid, syscall.SIGTERM, false); err != syscall.ESRCH {
		t.Fatalf("Kill of a reaped pid: %v, want ESRCH", err)
	}

	// An agent that could not set its own score back sets the child's
	// after the fork instead.
	r.oom, r.unshield = nil, true
	defer func() { r.unshield = false }()
	if out, _ := runCaptured(t, r, "sleep 0.2; cat /proc/self/oom_score_adj"); out != "0\n" {
		t.Fatalf("child oom_score_adj %q without the shield, want 0", out)
	}
}

// runCaptured runs a shell command through the reaper and returns its
// output and status.
func runCaptured(t *testing.T, r *Reaper, command string) (string, Status) {
	t.Helper()
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	pr, pw, _ := os.Pipe()
	defer pr.Close()
	attr := &syscall.ProcAttr{Files: []uintptr{null.Fd(), pw.Fd(), pw.Fd()}}
	pid, status, err := r.ForkExec("/bin/sh", []string{"sh", "-c", command}, attr)
	pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(pr)
	select {
	case st := <-status:
		if st.Pid != pid {
			t.Fatalf("status of %d for %d", st.Pid, pid)
		}
		return string(out), st
	case <-time.After(10 * time.Second):
		t.Fatal("no exit status")
	}
	return "", Status{}
}

// TestReaperGroupKillSparesReusedNumber: once a group's leader was reaped
// and its number belongs to a stranger's new session (a process the reaper
// did not start), a group kill of the old number reaches nobody.
func TestReaperGroupKillSparesReusedNumber(t *testing.T) {
	testManager(t) // starts the package's one reaper
	r := sharedReaper
	pid, status, err := r.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Setsid: true}})
	if err != nil {
		t.Fatal(err)
	}
	<-status
	stranger := strangerAtPid(t, r, pid)
	defer syscall.Kill(stranger, syscall.SIGKILL)
	if err := r.Kill(pid, syscall.SIGKILL, true); err != syscall.ESRCH {
		t.Errorf("group kill of a reused number: %v, want ESRCH", err)
	}
	time.Sleep(200 * time.Millisecond) // a SIGKILL would have ended it by now
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", stranger)); err != nil || strings.Contains(string(b), ") Z ") {
		t.Fatalf("the stranger holding the old number was killed: %q %v", b, err)
	}
}

// strangerAtPid makes a process the reaper did not start take pid want as
// the leader of a new session: a shell started at want-1 runs setsid sleep
// in the background, which gets want (retried when another fork on the
// machine takes a number first). It returns want.
func strangerAtPid(t *testing.T, r *Reaper, want int) int {
	t.Helper()
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	for range 50 {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(want-2)), 0); err != nil {
			t.Skipf("cannot choose the next pid here: %v", err)
		}
		pr, pw, _ := os.Pipe()
		_, status, err := r.ForkExec("/bin/sh", []string{"sh", "-c", "setsid sleep 30 </dev/null >/dev/null 2>&1 & echo $!"},
			&syscall.ProcAttr{Files: []uintptr{null.Fd(), pw.Fd(), pw.Fd()}})
		pw.Close()
		if err != nil {
			pr.Close()
			t.Fatal(err)
		}
		out, _ := io.ReadAll(pr)
		pr.Close()
		<-status
		got, _ := strconv.Atoi(strings.TrimSpace(string(out)))
		if got == want && leadsOwnGroup(want) {
			return got
		}
		if got > 0 {
			syscall.Kill(got, syscall.SIGKILL)
		}
	}
	t.Skipf("pid %d was always taken by someone else", want)
	return 0
}

// leadsOwnGroup waits until pid runs sleep as the leader of its own
// process group (setsid has run and exec'd).
func leadsOwnGroup(pid int) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		// pid (comm) state ppid pgrp ...
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b)[i+1:])
		if strings.Contains(string(b), "(sleep)") && len(f) > 2 && f[2] == strconv.Itoa(pid) {
			return true
		}
	}
	return false
}
