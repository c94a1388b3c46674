package proc

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// openFDs counts the test process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents) - 1 // the directory being read
}

// zombieChildren lists the test process's children that exited and were
// never reaped.
func zombieChildren() []int {
	self := os.Getpid()
	var out []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(self) {
			out = append(out, pid)
		}
	}
	return out
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestExecLeavesNothingBehind runs 500 short commands of every kind (with
// and without stdin, with output, killed by a signal, and every way of
// failing to start): descriptors, children and goroutines return to where
// they were.
func TestExecLeavesNothingBehind(t *testing.T) {
	m := testManager(t)
	dir := t.TempDir()
	noExec := filepath.Join(dir, "noexec")
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Executable bits but no format the kernel knows: only execve finds out.
	if err := os.WriteFile(garbage, []byte{0x7f, 'E', 'L', 'F', 0, 1, 2}, 0o755); err != nil {
		t.Fatal(err)
	}

	type kind struct {
		name  string
		opts  ExecOptions
		fails bool
		run   func(t *testing.T, s *stream.Stream)
	}
	kinds := []kind{
		{name: "true", opts: ExecOptions{Spec: Spec{Argv: []string{"true"}}}},
		{name: "output", opts: ExecOptions{Spec: Spec{Argv: []string{"sh", "-c", "echo out; echo err >&2"}}}},
		{name: "stdin", opts: ExecOptions{Spec: Spec{Argv: []string{"cat"}}, Stdin: true},
			run: func(t *testing.T, s *stream.Stream) {
				c := s.Control.(*process)
				if err := c.WriteInput([]byte("hello\n")); err != nil {
					t.Error(err)
				}
				if err := c.CloseInput(); err != nil {
					t.Error(err)
				}
			}},
		{name: "stdin unused", opts: ExecOptions{Spec: Spec{Argv: []string{"true"}}, Stdin: true}},
		{name: "killed", opts: ExecOptions{Spec: Spec{Argv: []string{"sleep", "30"}}, Stdin: true},
			run: func(t *testing.T, s *stream.Stream) {
				if err := s.Control.(*process).Signal(syscall.SIGKILL, true); err != nil {
					t.Error(err)
				}
			}},
		{name: "missing binary", opts: ExecOptions{Spec: Spec{Argv: []string{"/no/such/binary"}}}, fails: true},
		{name: "not executable", opts: ExecOptions{Spec: Spec{Argv: []string{noExec}}}, fails: true},
		{name: "exec format error", opts: ExecOptions{Spec: Spec{Argv: []string{garbage}}, Stdin: true}, fails: true},
		{name: "missing cwd", opts: ExecOptions{Spec: Spec{Argv: []string{"true"}, Cwd: filepath.Join(dir, "gone")}}, fails: true},
		{name: "unknown user", opts: ExecOptions{Spec: Spec{Argv: []string{"true"}, User: "no-such-user-xyz"}}, fails: true},
	}
	one := func(k kind) {
		s, err := m.Exec(k.opts)
		if k.fails {
			if err == nil || wire.AsError(err).Code != wire.CodeBadRequest {
				t.Errorf("%s: %v, want bad_request", k.name, err)
			}
			return
		}
		if err != nil {
			t.Errorf("%s: %v", k.name, err)
			return
		}
		if k.run != nil {
			k.run(t, s)
		}
		select {
		case <-s.Done():
		case <-time.After(30 * time.Second):
			t.Errorf("%s: stream did not end", k.name)
		}
	}
	// Warm up whatever the runtime opens once (the poller, user lookups).
	for _, k := range kinds {
		one(k)
	}
	eventually(t, "warm-up", func() (bool, string) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.running) == 0, ""
	})
	fds, goroutines := openFDs(t), runtime.NumGoroutine()

	const total, parallel = 500, 8
	work := make(chan kind)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				one(k)
			}
		}()
	}
	for i := range total {
		work <- kinds[i%len(kinds)]
	}
	close(work)
	wg.Wait()

	eventually(t, "descriptors", func() (bool, string) {
		n := openFDs(t)
		return n <= fds, fmt.Sprintf("%d open, %d before", n, fds)
	})
	eventually(t, "zombies", func() (bool, string) {
		z := zombieChildren()
		return len(z) == 0, fmt.Sprintf("unreaped children %v", z)
	})
	eventually(t, "goroutines", func() (bool, string) {
		n := runtime.NumGoroutine()
		if n <= goroutines {
			return true, ""
		}
		buf := make([]byte, 1<<20)
		return false, fmt.Sprintf("%d goroutines, %d before:\n%s", n, goroutines, buf[:runtime.Stack(buf, true)])
	})
}
