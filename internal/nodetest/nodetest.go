// Package nodetest runs the Node scripts with which tests drive the agent
// through the real npm client packages (installed by `make node-deps` into
// an internal/<pkg>/nodetest folder). Only tests import it.
package nodetest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/proc"
)

// scriptBound bounds one script run: kernel starts are slow on a loaded
// two-core machine, and a hung client must not hang the suite.
const scriptBound = 5 * time.Minute

// Require skips the test when node or the packages in dir (the
// nodetest folder, holding node_modules) are missing; under make
// (RAYITO_NODE_TESTS=1) it fails instead, so CI cannot pass by skipping.
// pkg is a package the scripts need, such as "@jupyterlab/services".
func Require(t testing.TB, dir, pkg string) {
	t.Helper()
	missing := ""
	if _, err := exec.LookPath("node"); err != nil {
		missing = "node is not installed"
	} else if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
		missing = pkg + " is not installed in " + dir + " (run make node-deps)"
	}
	if missing != "" {
		skipOrFail(t, missing)
	}
}

// RequireProgram returns the path of a program the Node tests need
// besides node (Debian's chromium), skipping or failing as Require does
// when it is missing.
func RequireProgram(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		skipOrFail(t, name+" is not installed (make deps installs it)")
	}
	return p
}

// skipOrFail skips, unless the run must include Node tests
// (RAYITO_NODE_TESTS=1, as make sets it): then it fails.
func skipOrFail(t testing.TB, missing string) {
	t.Helper()
	if os.Getenv("RAYITO_NODE_TESTS") != "" {
		t.Fatal(missing)
	}
	t.Skip(missing)
}

// Run runs `node script args...` in dir with env added to the
// environment, and fails the test with the script's output if it exits
// non-zero. It returns the output.
//
// The script is started and waited for through r, the test process's
// reaper: a reaper reaps every child of its process, as the agent's must,
// so a child started with os/exec could have its exit collected by the
// reaper first and its Wait fail with "no child processes".
func Run(t testing.TB, r *proc.Reaper, dir, script string, env []string, args ...string) string {
	t.Helper()
	return RunWatching(t, r, dir, script, env, nil, args...)
}

// RunWatching is Run that also hands each line the script writes, as it
// is written, to onLine (when not nil): a script signals the test so, for
// example to have it act on the agent while the client is connected.
// onLine runs on the test's goroutine and the script waits for nothing
// from it.
func RunWatching(t testing.TB, r *proc.Reaper, dir, script string, env []string, onLine func(string), args ...string) string {
	t.Helper()
	stdin, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	rd, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	pid, exited := spawn(t, r, dir, script, env, [3]*os.File{stdin, w, w}, args)
	w.Close()
	bound := time.AfterFunc(scriptBound, func() { r.Kill(pid, syscall.SIGKILL, true) })
	defer bound.Stop()
	// The pipe ends when the script and anything it started have exited,
	// or been killed at the bound.
	var out strings.Builder
	lines := bufio.NewScanner(rd)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		out.WriteString(lines.Text() + "\n")
		if onLine != nil {
			onLine(lines.Text())
		}
	}
	io.Copy(&out, rd) // what follows a line too long to scan
	if st := <-exited; st.ExitCode() != 0 {
		t.Fatalf("node %s %v: %v\n%s", script, args, exitError(st), out.String())
	}
	return out.String()
}

// exitError says how the script ended.
func exitError(st proc.Status) error {
	if st.Wait.Signaled() {
		return fmt.Errorf("killed by %v (at the %v bound?)", st.Wait.Signal(), scriptBound)
	}
	return fmt.Errorf("exit status %d", st.ExitCode())
}

// spawn starts `node script args...` in dir through r, with env added to
// the environment and files as its stdin, stdout and stderr. The script
// gets a process group of its own, so that killing it at a bound kills
// what it started too.
func spawn(t testing.TB, r *proc.Reaper, dir, script string, env []string, files [3]*os.File, args []string) (int, <-chan proc.Status) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal(err)
	}
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   append(os.Environ(), env...),
		Files: []uintptr{files[0].Fd(), files[1].Fd(), files[2].Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}
	pid, exited, err := r.ForkExec(node, append([]string{"node", script}, args...), attr)
	if err != nil {
		t.Fatalf("node %s %v: %v", script, args, err)
	}
	return pid, exited
}
