package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/rootfs/vm"
)

// The runner's control socket: what a host does to a sandbox, for a
// person to try (make vm-pause, vm-snapshot, vm-restore, vm-resume). QEMU
// has one QMP connection and the runner holds it, so the commands go to
// the runner, one line each, and the answer is one line.
//
//	pause             quiesce the sandbox (POST /v1/pause), then stop the
//	                  guest's vCPUs (it keeps its memory)
//	resume            continue it, then tell the agent (POST /v1/resume)
//	snapshot [DIR]    quiesce the sandbox, dropping its page cache, then save
//	                  memory, devices and disk to DIR; the guest stays paused
//	restore [DIR]     replace the VM with a new one from DIR, on the same
//	                  port, and tell the agent; any number of times
//	status            the agent's URL, whether the guest runs, its generation

// commands lists the control commands; the others are the runner's own.
var commands = map[string]bool{"pause": true, "resume": true, "snapshot": true, "restore": true, "status": true}

// controller runs the control commands on the runner's VM.
type controller struct {
	cfg      vm.Config
	token    string
	snapshot string // default snapshot directory

	mu       sync.Mutex
	v        *vm.VM
	paused   bool
	n        int // resumes reported so far
	restores int
}

// serve answers the control socket at path until ctx ends.
func (c *controller) serve(ctx context.Context, path string) error {
	os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	go func() {
		<-ctx.Done()
		l.Close()
		os.Remove(path)
	}()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				line, err := bufio.NewReader(conn).ReadString('\n')
				if err != nil && line == "" {
					return
				}
				answer, err := c.run(ctx, strings.Fields(line))
				if err != nil {
					answer = "error: " + err.Error()
				}
				fmt.Fprintln(conn, answer)
			}()
		}
	}()
	return nil
}

// current is the VM now running (a restore replaces it).
func (c *controller) current() *vm.VM {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.v
}

// run carries out one command, one at a time.
func (c *controller) run(ctx context.Context, args []string) (string, error) {
	if len(args) == 0 || !commands[args[0]] {
		return "", fmt.Errorf("unknown command %q: pause, resume, snapshot [DIR], restore [DIR] or status", strings.Join(args, " "))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	dir := c.snapshot
	if len(args) > 1 {
		dir = args[1]
	}
	switch args[0] {
	case "pause":
		q := c.quiesce(ctx, "none")
		if err := c.v.Pause(ctx); err != nil {
			return "", err
		}
		c.paused = true
		return "paused (" + q + "): the guest's vCPUs are stopped; resume continues it", nil
	case "resume":
		if err := c.v.Resume(ctx); err != nil {
			return "", err
		}
		c.paused = false
		h, err := c.reportResume(ctx)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("resumed: generation %d, kernel_state_lost %v", h.ResumeGeneration, h.KernelStateLost), nil
	case "snapshot":
		started := time.Now()
		q := "already paused"
		if !c.paused {
			q = c.quiesce(ctx, "cache")
			// The guest hands freed memory to QEMU 2 s after freeing it.
			time.Sleep(reportDelay)
		}
		if err := c.v.Snapshot(ctx, dir); err != nil {
			return "", err
		}
		c.paused = true
		return fmt.Sprintf("snapshot in %s (%s; %s); the guest is paused: resume continues it, restore brings the snapshot back",
			dir, time.Since(started).Round(time.Millisecond), q), nil
	case "restore":
		if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err != nil {
			return "", fmt.Errorf("no snapshot in %s (snapshot first): %w", dir, err)
		}
		port := c.v.HostPort()
		c.v.Close() // its exit status says nothing here: it was stopped on purpose
		cfg := c.cfg
		cfg.HostPort = port
		if cfg.WorkDir != "" {
			// A directory of its own in the runner's, never the one the
			// last VM's files are still in.
			c.restores++
			cfg.WorkDir = filepath.Join(cfg.WorkDir, fmt.Sprintf("restore-%d", c.restores))
			if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
				return "", err
			}
		}
		started := time.Now()
		v, err := vm.Restore(ctx, cfg, dir)
		if err != nil {
			return "", fmt.Errorf("restore (the VM is gone; restore again or stop the runner): %w", err)
		}
		c.v, c.paused = v, false
		if err := v.WaitHealthy(ctx); err != nil {
			return "", err
		}
		h, err := c.reportResume(ctx)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("restored from %s in %s: generation %d, kernel_state_lost %v",
			dir, time.Since(started).Round(time.Millisecond), h.ResumeGeneration, h.KernelStateLost), nil
	}
	url := strings.Replace(c.v.AgentURL(), "http://", "ws://", 1)
	if c.paused {
		return fmt.Sprintf("agent %s, paused", url), nil
	}
	h, err := c.host().Health(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("agent %s, running, generation %d", url, h.ResumeGeneration), nil
}

func (c *controller) host() client.Host { return client.Host{URL: c.v.AgentURL(), Token: c.token} }

// reportDelay is how long the runner waits after a pause that dropped the
// page cache before it saves memory: Linux reports freed pages to the
// balloon device (and QEMU drops them from the snapshot) 2 s after they
// were freed.
const reportDelay = 2500 * time.Millisecond

// quiesce asks the agent to get the sandbox ready for a pause, as a host
// does first, and says in a few words what it did. An agent that cannot
// (an older one) does not stop the pause.
func (c *controller) quiesce(ctx context.Context, shrink string) string {
	a, err := c.host().Pause(ctx, client.PauseOptions{Shrink: shrink})
	if err != nil {
		return "the agent did not quiesce: " + err.Error()
	}
	return fmt.Sprintf("the agent quiesced in %.0f ms, MemAvailable %d MiB to %d MiB", a.DurationMs, a.MemAvailableBefore>>20, a.MemAvailableAfter>>20)
}

// reportResume tells the agent the guest was resumed, as a host does:
// a resume id, the wall clock, fresh entropy.
func (c *controller) reportResume(ctx context.Context) (client.Health, error) {
	c.n++
	entropy := make([]byte, 32)
	rand.Read(entropy)
	return c.host().Resume(ctx, client.ResumeOptions{
		ResumeID: fmt.Sprintf("vmrun-%d-%d", os.Getpid(), c.n), TimeUnixNs: time.Now().UnixNano(), Entropy: entropy,
	})
}

// control sends one command to a running runner's socket and prints its
// answer; the exit code says whether it worked.
func control(path string, args []string) int {
	conn, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmrun: no runner at %s (make vm first): %v\n", path, err)
		return 1
	}
	defer conn.Close()
	fmt.Fprintln(conn, strings.Join(args, " "))
	answer, _ := bufio.NewReader(conn).ReadString('\n')
	answer = strings.TrimSpace(answer)
	fmt.Println(answer)
	if answer == "" || strings.HasPrefix(answer, "error: ") {
		return 1
	}
	return 0
}
