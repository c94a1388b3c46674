package resume

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The hook tests here try, as the unprivileged user nobody would, to make
// the agent (root) run nobody's code as root. Each builds a hooks tree
// under a directory nobody can reach (0755 on the way) and a "marker"
// script owned by root that records the uid it ran as, so a run as root
// of anything the attacker chose shows in the file.

const nobody = 65534

// rootOnly skips unless the test runs as root (it chowns to nobody).
func rootOnly(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to act as nobody and to run hooks as their owner")
	}
}

// openTree makes a hooks root reachable by nobody (every directory from
// the test's temporary one down is 0755 and root's) and, in it, the file
// "ran" anyone may append to, where marker scripts record their uid.
func openTree(t *testing.T) (root, log string) {
	t.Helper()
	root = t.TempDir()
	for d := root; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	log = filepath.Join(root, "ran")
	if err := os.WriteFile(log, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(log, 0o666)
	return root, log
}

// nobodysDir makes root/name, a 0755 directory nobody owns.
func nobodysDir(t *testing.T, root, name string) string {
	t.Helper()
	d := filepath.Join(root, name)
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	return d
}

// asNobody runs a shell command as nobody and fails the test on error.
func asNobody(t *testing.T, script string) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as nobody: %s: %v: %s", script, err, out)
	}
}

// writeScript writes an executable shell script.
func writeScript(t *testing.T, path, body string, mode os.FileMode, uid int) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, mode)
	if err := os.Chown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// uidsRun reads the uids the marker scripts recorded, one a line.
func uidsRun(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// TestHookSymlinkToARootProgramIsRefused: nobody owns the hook directory
// and links a root-owned program into it; the link is refused, not run
// as root (the old check followed it and took the target's owner).
func TestHookSymlinkToARootProgramIsRefused(t *testing.T) {
	rootOnly(t)
	root, log := openTree(t)
	rootProg := filepath.Join(root, "root-program")
	writeScript(t, rootProg, "id -u >> "+log, 0o755, 0)
	d := nobodysDir(t, root, "pre-pause.d")
	asNobody(t, "ln -s "+rootProg+" "+d+"/20-link")
	rs := (&Hooks{Dir: root, Spawn: spawnForTest}).Run(context.Background(), HookPrePause, HookEnv{}, nil)
	if ran := uidsRun(t, log); len(ran) != 0 {
		t.Fatalf("the linked root program ran as %v", ran)
	}
	if len(rs) != 1 || !strings.Contains(rs[0].Refused, "symbolic link") {
		t.Fatalf("results %+v, want the link refused as a symbolic link", rs)
	}
}

// TestHookSwapLoopNeverRunsAsRoot: nobody, in a directory of its own,
// renames a fresh symlink over 20-link in a loop, its target switching
// between a root-owned script and nobody's own, while hooks run 40 times.
// The old check-then-exec by name ran nobody's script as root in 5 of 40.
// The hooks directory nobody owns is refused for a root hook anyway; a
// hook of nobody's own runs as nobody, never as root.
func TestHookSwapLoopNeverRunsAsRoot(t *testing.T) {
	rootOnly(t)
	root, log := openTree(t)
	rootProg := filepath.Join(root, "root-program")
	writeScript(t, rootProg, "echo root-program-$(id -u) >> "+log, 0o755, 0)
	d := nobodysDir(t, root, "post-resume.d")
	mine := filepath.Join(d, "mine")
	writeScript(t, mine, "echo nobody-script-$(id -u) >> "+log, 0o755, nobody)
	stop := filepath.Join(root, "stop")
	loop := exec.Command("/bin/sh", "-c", fmt.Sprintf(`cd %s; while [ ! -e %s ]; do ln -sf %s .t1 && mv -T .t1 20-link; ln -sf %s .t2 && mv -T .t2 20-link; done`, d, stop, rootProg, mine))
	loop.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if err := loop.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		os.WriteFile(stop, nil, 0o644)
		loop.Wait()
	}()
	h := &Hooks{Dir: root, Spawn: spawnForTest}
	for range 40 {
		for _, r := range h.Run(context.Background(), HookPostResume, HookEnv{}, nil) {
			if filepath.Base(r.Hook) == "20-link" && r.Refused == "" && r.NotStarted == "" {
				t.Errorf("the swapped link was run: %+v", r)
			}
		}
	}
	for _, line := range uidsRun(t, log) {
		if line != "nobody-script-65534" {
			t.Errorf("ran: %s (only nobody's own hook, as nobody, may run)", line)
		}
	}
}

// TestHooksRootWritableByOthersIsRefused: with the hooks root 0777, nobody
// moves post-resume.d aside and makes its own, holding a root-owned
// script (a copy it cannot make, so a hard link is the way: here root
// makes it, as protected_hardlinks would stop nobody) and a link; nothing
// runs, and each is refused naming the root.
func TestHooksRootWritableByOthersIsRefused(t *testing.T) {
	rootOnly(t)
	root, log := openTree(t)
	hooks := filepath.Join(root, "hooks")
	os.Mkdir(hooks, 0o755)
	d := filepath.Join(hooks, "post-resume.d")
	os.Mkdir(d, 0o755)
	writeScript(t, filepath.Join(d, "10-root"), "id -u >> "+log, 0o755, 0)
	os.Chmod(hooks, 0o777)
	asNobody(t, fmt.Sprintf("mv %s/post-resume.d %s/old && mkdir %s/post-resume.d", hooks, hooks, hooks))
	evil := filepath.Join(d, "20-evil")
	if err := os.Link(filepath.Join(hooks, "old", "10-root"), evil); err != nil {
		t.Fatal(err)
	}
	rs := (&Hooks{Dir: hooks, Spawn: spawnForTest}).Run(context.Background(), HookPostResume, HookEnv{}, nil)
	if ran := uidsRun(t, log); len(ran) != 0 {
		t.Fatalf("a hook ran as %v in a directory nobody made", ran)
	}
	if len(rs) != 1 || !strings.Contains(rs[0].Refused, hooks) {
		t.Fatalf("results %+v, want the hook refused naming the writable root or its directory", rs)
	}
	// Made safe again, the same tree runs its root hook.
	os.Chmod(hooks, 0o755)
	os.Chown(d, 0, 0)
	rs = (&Hooks{Dir: hooks, Spawn: spawnForTest}).Run(context.Background(), HookPostResume, HookEnv{}, nil)
	if ran := uidsRun(t, log); len(rs) != 1 || len(ran) != 1 || ran[0] != "0" {
		t.Fatalf("the safe tree: %+v, ran %v", rs, ran)
	}
}

// TestGroupWritableHooksAreRefused: a root-owned 0775 hook of group
// nogroup, which nobody is in, is refused (nobody could rewrite it and
// have it run as root); so is a group-writable directory. A group with no
// member but root may write.
func TestGroupWritableHooksAreRefused(t *testing.T) {
	rootOnly(t)
	root, log := openTree(t)
	d := filepath.Join(root, "post-resume.d")
	os.Mkdir(d, 0o755)
	hook := filepath.Join(d, "10-hook")
	writeScript(t, hook, "id -u >> "+log, 0o775, 0)
	os.Chown(hook, 0, nobody)
	members := func(gid uint32) []uint32 {
		if gid == nobody {
			return []uint32{nobody}
		}
		return []uint32{0}
	}
	h := &Hooks{Dir: root, Spawn: spawnForTest, Groups: members}
	rs := h.Run(context.Background(), HookPostResume, HookEnv{}, nil)
	if len(rs) != 1 || !strings.Contains(rs[0].Refused, "writable by group 65534") {
		t.Fatalf("a hook its group's members may write: %+v", rs)
	}
	// The real /etc/group and /etc/passwd say the same of nogroup.
	rs = (&Hooks{Dir: root, Spawn: spawnForTest}).Run(context.Background(), HookPostResume, HookEnv{}, nil)
	if len(rs) != 1 || rs[0].Refused == "" {
		t.Fatalf("with the system's groups: %+v", rs)
	}
	asNobody(t, "echo 'id -u >> "+log+"' >> "+hook)
	os.Chown(hook, 0, 0) // group root: only root in it
	os.Chmod(hook, 0o775)
	os.Chown(d, 0, nobody)
	os.Chmod(d, 0o775)
	rs = h.Run(context.Background(), HookPostResume, HookEnv{}, nil)
	if len(rs) != 1 || !strings.Contains(rs[0].Refused, "directory "+d) {
		t.Fatalf("a hook in a directory its group's members may write: %+v", rs)
	}
	os.Chown(d, 0, 0)
	rs = h.Run(context.Background(), HookPostResume, HookEnv{}, nil)
	if len(rs) != 1 || rs[0].Refused != "" || hookFailed(rs[0]) {
		t.Fatalf("group root, only root in it: %+v", rs)
	}
	if ran := uidsRun(t, log); len(ran) != 2 {
		t.Fatalf("ran %v, want the hook (and nobody's line in it) once, as root, after the group was fixed", ran)
	}
}

// TestHookNamesAreRunPartsNames: backups, editors' and package managers'
// copies and dot-files never run; names of letters, digits, '_' and '-'
// do, in order.
func TestHookNamesAreRunPartsNames(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	body := `basename "$RAYITO_HOOK" >> ` + out
	dir := hookTree(t, HookPostResume, map[string]string{
		"50-ssh": body, "50-ssh.bak": body, "50-ssh~": body, "50-ssh.dpkg-old": body,
		".tmp0": body, "10_first": body, "60-ssh.sh": body, "#50-ssh#": body,
	})
	rs := (&Hooks{Dir: dir, Spawn: spawnForTest}).Run(context.Background(), HookPostResume, HookEnv{}, nil)
	b, _ := os.ReadFile(out)
	if string(b) != "10_first\n50-ssh\n" || len(rs) != 2 {
		t.Fatalf("ran %q, results %+v: want 10_first and 50-ssh only", b, rs)
	}
}

// TestHooksEventBound: six hanging hooks, each under a 5 s timeout, end
// with the event's bound (1 s here): the first is killed saying why (not
// timed_out: its own timer did not fire), the rest never start.
func TestHooksEventBound(t *testing.T) {
	scripts := map[string]string{}
	for i := range 6 {
		scripts[fmt.Sprintf("%d-hang", i)] = "sleep 30"
	}
	dir := hookTree(t, HookPostResume, scripts)
	h := &Hooks{Dir: dir, Timeout: 5 * time.Second, Total: time.Second, Spawn: spawnForTest}
	start := time.Now()
	rs := h.Run(context.Background(), HookPostResume, HookEnv{}, nil)
	took := time.Since(start)
	if len(rs) != 6 {
		t.Fatalf("results %+v", rs)
	}
	if rs[0].TimedOut || !strings.Contains(rs[0].Killed, "bound (1s)") || rs[0].Signal == "" {
		t.Errorf("the first hook: %+v, want killed by the event's bound, not timed out", rs[0])
	}
	for _, r := range rs[1:] {
		if r.NotStarted == "" || r.DurationMs != 0 {
			t.Errorf("a hook after the bound: %+v, want not started", r)
		}
	}
	// Far below the 30 s the first hook would take, or the six times 5 s.
	if took > 4*time.Second {
		t.Errorf("the hooks took %s with a 1 s bound", took)
	}
}

// TestHookCancelledSaysWhy: a hook killed because its context ended (the
// pause overtaken) says the context's cause, not timed_out.
func TestHookCancelledSaysWhy(t *testing.T) {
	dir := hookTree(t, HookPrePause, map[string]string{"1-hang": "sleep 30", "2-next": "exit 0"})
	ctx, cancel := context.WithCancelCause(context.Background())
	h := &Hooks{Dir: dir, Spawn: spawnForTest}
	done := make(chan []HookResult)
	running := make(chan struct{}, 8)
	go func() {
		done <- h.Run(ctx, HookPrePause, HookEnv{}, func(rs []HookResult) {
			if len(rs) > 0 && rs[len(rs)-1].Running {
				running <- struct{}{}
			}
		})
	}()
	<-running
	cancel(errResumeFirst)
	rs := <-done
	if len(rs) != 2 || rs[0].TimedOut || rs[0].Killed != errResumeFirst.Error() || rs[1].NotStarted != errResumeFirst.Error() {
		t.Fatalf("results %+v", rs)
	}
}

// TestOvertakenPauseStartsNoMoreHooks: a pause's answer at its deadline
// shows the pre-pause hook that is running; an abort then kills it saying
// why, and none of the 30 hooks after it starts.
func TestOvertakenPauseStartsNoMoreHooks(t *testing.T) {
	out := filepath.Join(t.TempDir(), "started")
	scripts := map[string]string{"00-slow": "echo 00-slow >> " + out + "; sleep 30"}
	for i := 1; i <= 30; i++ {
		scripts[fmt.Sprintf("%02d-later", i)] = "echo $RAYITO_HOOK >> " + out
	}
	dir := hookTree(t, HookPrePause, scripts)
	j := &journal{}
	m := journaled(j, false, Options{Machine: Machine{Hooks: &Hooks{Dir: dir, Spawn: spawnForTest}}})
	req := pauseReq()
	req.Deadline = 300 * time.Millisecond
	a, err := m.Pause(context.Background(), req)
	if err != nil || !a.DeadlinePassed {
		t.Fatalf("pause: %+v, %v", a, err)
	}
	// The deadline may come before the hook's start on a loaded machine:
	// then the answer has no hook yet, and a later read shows it.
	for deadline := time.Now().Add(waitHooks); len(a.Hooks) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		a = *m.Paused()
	}
	if len(a.Hooks) != 1 || !a.Hooks[0].Running || filepath.Base(a.Hooks[0].Hook) != "00-slow" {
		t.Fatalf("the pause's hooks while the first runs: %+v", a.Hooks)
	}
	if _, err := m.Abort(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	if string(b) != "00-slow\n" {
		t.Fatalf("hooks started after the abort: %q", b)
	}
}

// waitHooks bounds a wait for a hook to start, far above what it takes.
const waitHooks = 20 * time.Second
