// Package nodetest runs the Node scripts with which tests drive the agent
// through the real npm client packages (installed by `make node-deps` into
// an internal/<pkg>/nodetest folder). Only tests import it.
package nodetest

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	if missing == "" {
		return
	}
	if os.Getenv("RAYITO_NODE_TESTS") != "" {
		t.Fatal(missing)
	}
	t.Skip(missing)
}

// Run runs `node script args...` in dir with env added to the
// environment, and fails the test with the script's output if it exits
// non-zero. It returns the output.
func Run(t testing.TB, dir, script string, env []string, args ...string) string {
	t.Helper()
	return RunWatching(t, dir, script, env, nil, args...)
}

// RunWatching is Run that also hands each line the script writes, as it
// is written, to onLine (when not nil): a script signals the test so, for
// example to have it act on the agent while the client is connected.
// onLine runs on the test's goroutine and the script waits for nothing
// from it.
func RunWatching(t testing.TB, dir, script string, env []string, onLine func(string), args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scriptBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{script}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatalf("node %s %v: %v", script, args, err)
	}
	// Wait from the start, as CombinedOutput does: a test that runs a
	// proc.Reaper would reap the script first if nobody were waiting yet.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// The pipe ends when the script and anything it started have exited,
	// or been killed at the bound.
	var out strings.Builder
	lines := bufio.NewScanner(r)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		out.WriteString(lines.Text() + "\n")
		if onLine != nil {
			onLine(lines.Text())
		}
	}
	io.Copy(&out, r) // what follows a line too long to scan
	if err := <-exited; err != nil {
		t.Fatalf("node %s %v: %v\n%s", script, args, err, out.String())
	}
	return out.String()
}
