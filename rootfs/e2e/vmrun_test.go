package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestVMRunnerStopsQEMU: the runner behind `make vm` never leaves a VM
// behind. Its parent killed (make vm & killed by its PID), it stops QEMU;
// itself killed with SIGKILL, QEMU dies with it.
func TestVMRunnerStopsQEMU(t *testing.T) {
	tv := vmConfig(t)
	runner := filepath.Join(t.TempDir(), "vmrun")
	if out, err := exec.Command("go", "build", "-o", runner, "../vm/cmd/vmrun").CombinedOutput(); err != nil {
		t.Fatalf("build the runner: %v\n%s", err, out)
	}
	var args []string
	for _, c := range []struct {
		name string
		// start returns the process to kill and the runner's pid.
		start func() (victim *exec.Cmd, runnerPid func() int)
	}{
		{"parent killed", func() (*exec.Cmd, func() int) {
			// A shell that stays the runner's parent, as make does.
			sh := exec.Command("/bin/sh", "-c", shellQuote(runner)+" "+strings.Join(quoteAll(args), " ")+"; echo runner ended")
			return sh, func() int { return childOf(t, sh.Process.Pid, "vmrun") }
		}},
		{"runner killed", func() (*exec.Cmd, func() int) {
			cmd := exec.Command(runner, args...)
			return cmd, func() int { return cmd.Process.Pid }
		}},
	} {
		// Each runner's VM in a directory the test removes: a runner
		// killed with SIGKILL cannot remove its own.
		args = []string{"-build", buildDir(t), "-image", tv.cfg.Image, "-dir", t.TempDir(), "-accel", runnerAccel()}
		t.Run(c.name, func(t *testing.T) {
			victim, runnerPid := c.start()
			victim.Env = append(os.Environ(), "RAYITO_ACCESS_TOKEN="+tv.token)
			out, err := victim.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			victim.Stderr = os.Stderr
			if err := victim.Start(); err != nil {
				t.Fatal(err)
			}
			defer victim.Process.Kill()
			healthy := make(chan bool, 1)
			go func() {
				sc := bufio.NewScanner(out)
				sent := false
				for sc.Scan() {
					if !sent && strings.HasPrefix(sc.Text(), "agent: ") {
						healthy <- true
						sent = true
					}
				}
				if !sent {
					healthy <- false
				}
				io.Copy(io.Discard, out)
			}()
			select {
			case ok := <-healthy:
				if !ok {
					t.Fatal("the runner ended before its agent was healthy")
				}
			case <-time.After(bootTimeout):
				t.Fatal("the runner's agent was not healthy in time")
			}
			runner := runnerPid()
			qemu := childOf(t, runner, "qemu")
			defer syscall.Kill(qemu, syscall.SIGKILL)   // whatever happens,
			defer syscall.Kill(runner, syscall.SIGKILL) // nothing is left
			if err := victim.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			victim.Wait()
			deadline := time.Now().Add(time.Minute)
			for alive(qemu) {
				if time.Now().After(deadline) {
					t.Fatalf("QEMU (pid %d) still runs a minute after the %s", qemu, c.name)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// childOf returns the pid of parent's child whose command name starts
// with name.
func childOf(t *testing.T, parent int, name string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				continue
			}
			// pid (comm) state ppid ...
			s := string(b)
			open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
			if open < 0 || close < open {
				continue
			}
			fields := strings.Fields(s[close+1:])
			if len(fields) > 1 && fields[1] == strconv.Itoa(parent) && strings.HasPrefix(s[open+1:close], name) {
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s child of pid %d", name, parent)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether pid runs (a zombie does not: it is only waiting
// to be reaped).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || len(s) < i+3 || s[i+2] != 'Z'
}

func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = shellQuote(a)
	}
	return out
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
