package resume

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// spawnForTest starts a hook as the agent's reaper would, without the
// user cgroup.
func spawnForTest(path string, argv []string, attr *syscall.ProcAttr) (int, <-chan HookExit, error) {
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan HookExit, 1)
	go func() {
		var ws syscall.WaitStatus
		for {
			if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
				break
			}
		}
		if ws.Signaled() {
			ch <- HookExit{Signal: ws.Signal().String()}
			return
		}
		code := ws.ExitStatus()
		ch <- HookExit{Code: &code}
	}()
	return pid, ch, nil
}

// hookTree makes DIR/EVENT.d with the given scripts (name: body).
func hookTree(t *testing.T, event HookEvent, scripts map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	d := filepath.Join(dir, string(event)+".d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(d, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestHooksRunInOrderWithTheirEnvironment: every hook of the event runs,
// in name order, told the event, generation, pause, sandbox and clone.
func TestHooksRunInOrderWithTheirEnvironment(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	body := `echo "$RAYITO_HOOK $RAYITO_EVENT $RAYITO_RESUME_GENERATION $RAYITO_PAUSED_MS $RAYITO_SANDBOX_ID $RAYITO_CLONE" >> ` + out
	dir := hookTree(t, HookPostClone, map[string]string{"20-b": body, "10-a": body, "30-c": body + "; echo oops >&2; exit 3"})
	h := &Hooks{Dir: dir, Spawn: spawnForTest}
	rs := h.Run(context.Background(), HookPostClone, HookEnv{Generation: 4, PausedMs: 1234, SandboxID: "sb-2", Clone: true}, nil)
	b, _ := os.ReadFile(out)
	d := filepath.Join(dir, "post-clone.d")
	want := d + "/10-a post-clone 4 1234 sb-2 1\n" + d + "/20-b post-clone 4 1234 sb-2 1\n" + d + "/30-c post-clone 4 1234 sb-2 1\n"
	if string(b) != want {
		t.Errorf("the hooks wrote\n%s\nwant\n%s", b, want)
	}
	if len(rs) != 3 || rs[0].Hook != d+"/10-a" || rs[2].ExitCode == nil || *rs[2].ExitCode != 3 || rs[2].StderrTail != "oops\n" || hookFailed(rs[0]) {
		t.Errorf("results: %+v", rs)
	}
	if got := h.Run(context.Background(), HookPrePause, HookEnv{}, nil); len(got) != 0 {
		t.Errorf("an event without a directory ran %+v", got)
	}
	if got := (&Hooks{Dir: filepath.Join(dir, "missing"), Spawn: spawnForTest}).Run(context.Background(), HookPostClone, HookEnv{}, nil); got != nil {
		t.Errorf("a missing hooks dir: %+v", got)
	}
}

// TestHooksRefusedAndBounded: a hook writable by others or not executable
// is refused and reported; one that sleeps past its timeout is killed with
// its group; one that leaves a daemon behind and floods stdout returns
// once it exits; stderr keeps its tail only.
func TestHooksRefusedAndBounded(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "daemon.pid")
	dir := hookTree(t, HookPostResume, map[string]string{
		"1-open":    "exit 0",
		"2-notexec": "exit 0",
		"3-slow":    "sleep 30",
		"4-daemon":  "sleep 600 >/dev/null 2>&1 & echo $! > " + pidFile + "; head -c 20000000 /dev/zero; exit 0",
		"5-chatty":  `i=0; while [ $i -lt 2000 ]; do echo "line $i" >&2; i=$((i+1)); done`,
		"6-fine":    "exit 0",
	})
	d := filepath.Join(dir, "post-resume.d")
	os.Chmod(filepath.Join(d, "1-open"), 0o777)
	os.Chmod(filepath.Join(d, "2-notexec"), 0o644)
	// Far above what the quick hooks need on a loaded machine, far below
	// the slow one's 30 s.
	h := &Hooks{Dir: dir, Timeout: 3 * time.Second, Spawn: spawnForTest}
	rs := h.Run(context.Background(), HookPostResume, HookEnv{}, nil)
	if len(rs) != 6 {
		t.Fatalf("results: %+v", rs)
	}
	if !strings.Contains(rs[0].Refused, "writable by others") || rs[1].Refused != "not executable" {
		t.Errorf("refusals: %+v, %+v", rs[0], rs[1])
	}
	if !rs[2].TimedOut || rs[2].Signal == "" {
		t.Errorf("the slow hook: %+v, want timed out and killed", rs[2])
	}
	if rs[3].ExitCode == nil || *rs[3].ExitCode != 0 || rs[3].TimedOut {
		t.Errorf("the hook that left a daemon: %+v", rs[3])
	}
	b, _ := os.ReadFile(pidFile)
	daemon, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if daemon <= 0 || syscall.Kill(daemon, 0) != nil {
		t.Errorf("the hook's daemon (%q) is not running: it was waited for or killed", b)
	} else {
		syscall.Kill(daemon, syscall.SIGKILL)
	}
	if tail := rs[4].StderrTail; len(tail) > hookTailBytes || !strings.HasSuffix(tail, "line 1999\n") {
		t.Errorf("the chatty hook's tail: %d bytes ending %q", len(tail), tail[max(0, len(tail)-20):])
	}
	if hookFailed(rs[5]) {
		t.Errorf("the hook after them all: %+v", rs[5])
	}
}

// TestHooksRunAsTheirOwner: a hook owned by nobody runs as nobody.
func TestHooksRunAsTheirOwner(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a hook as another user")
	}
	dir := hookTree(t, HookPostResume, map[string]string{"id": "id -u >&2"})
	// nobody must reach it: t.TempDir's directories are the test's own.
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	hook := filepath.Join(dir, "post-resume.d", "id")
	if err := os.Chown(hook, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	rs := (&Hooks{Dir: dir, Spawn: spawnForTest}).Run(context.Background(), HookPostResume, HookEnv{}, nil)
	if len(rs) != 1 || strings.TrimSpace(rs[0].StderrTail) != "65534" {
		t.Errorf("a hook owned by nobody: %+v", rs)
	}
}

// TestLifecycleFile: the feed says paused during a pause, running after
// an abort, and the generation, pause time and clone after a resume.
func TestLifecycleFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "run", "lifecycle.json")
	j := &journal{}
	m := journaled(j, false, Options{Machine: Machine{LifecycleFile: file}})
	read := func() Lifecycle {
		t.Helper()
		var l Lifecycle
		b, err := os.ReadFile(file)
		if err != nil || json.Unmarshal(b, &l) != nil {
			t.Fatalf("lifecycle file: %s, %v", b, err)
		}
		return l
	}
	if l := read(); l.State != "running" || l.Generation != 0 {
		t.Fatalf("at start: %+v", l)
	}
	m.Pause(context.Background(), pauseReq())
	if l := read(); l.State != "paused" || l.LastPauseUnixMs == 0 {
		t.Fatalf("paused: %+v", l)
	}
	m.Abort()
	if l := read(); l.State != "running" || l.Generation != 0 {
		t.Fatalf("after the abort: %+v", l)
	}
	m.Pause(context.Background(), pauseReq())
	m.Resume(context.Background(), Report{Source: SourceHost, SandboxID: "clone-1"})
	if l := read(); l.State != "running" || l.Generation != 1 || !l.Clone || l.SandboxID != "clone-1" || l.LastResumeUnixMs == 0 {
		t.Fatalf("after the resume: %+v", l)
	}
}

// TestCloneHooksRunOnceWhicheverReportNamesIt: the post-clone hooks run
// at the resume that names a new sandbox, also when the guest noticed the
// restore first and the host's report (with the sandbox id) comes after.
func TestCloneHooksRunOnceWhicheverReportNamesIt(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	dir := hookTree(t, HookPostClone, map[string]string{"10-mark": `echo "$RAYITO_SANDBOX_ID $RAYITO_RESUME_GENERATION" >> ` + out})
	for _, guestFirst := range []bool{false, true} {
		os.Remove(out)
		m, err := New(Options{Machine: Machine{Hooks: &Hooks{Dir: dir, Spawn: spawnForTest}}})
		if err != nil {
			t.Fatal(err)
		}
		if guestFirst {
			m.Resume(context.Background(), Report{Source: SourceClock})
		}
		st := m.Resume(context.Background(), Report{Source: SourceHost, SandboxID: "sb-9"})
		b, _ := os.ReadFile(out)
		if string(b) != "sb-9 1\n" || st.Generation != 1 || st.LastResume == nil || len(st.LastResume.Hooks) != 1 || !st.LastResume.NewSandbox {
			t.Errorf("guest first %v: the hook wrote %q; state %+v", guestFirst, b, st.LastResume)
		}
	}
}
