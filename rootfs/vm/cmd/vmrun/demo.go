package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/rootfs/vm"
)

// demo runs the product's promise end to end in a VM of its own: a kernel
// variable and a running command survive a snapshot and a restore. A
// kernel sets x = 42, a background command counts; the VM is snapshotted
// and closed, a new one is restored from the snapshot on the same port and
// the host reports the resume; the client reconnects by itself, x is still
// 42, the counter's stream goes on without a gap or a repeat, and the
// resume generation is 1. It fails if any of that does not hold.
func demo(cfg vm.Config, wait time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := stopWithParent(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, wait+10*time.Minute)
	defer cancel()
	step := func(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

	step("booting the image (%s)", cfg.Image)
	v, err := vm.Boot(ctx, cfg)
	if err != nil {
		return err
	}
	cur := v
	defer func() { cur.Close() }()
	if err := v.WaitHealthy(ctx); err != nil {
		return err
	}
	token, err := giveToken(ctx, v.AgentURL())
	if err != nil {
		return err
	}
	url := strings.Replace(v.AgentURL(), "http://", "ws://", 1)
	c, err := client.Dial(ctx, url, client.Options{Token: token, ReconnectTimeout: wait + time.Minute})
	if err != nil {
		return err
	}
	defer c.Close()

	step(`run_code("x = 42") (the first cell starts the kernel)`)
	k := c.DefaultKernel()
	if ex, err := k.Execute(ctx, "x = 42", client.ExecuteOptions{}); err != nil || ex.Status != client.StatusOK {
		return fmt.Errorf("x = 42: %+v, %v", ex, err)
	}
	step("a background command counts, one line every 200 ms")
	p, err := c.Exec(ctx, client.ExecOptions{Cmd: "i=0; while :; do i=$((i+1)); echo $i; sleep 0.2; done", Tag: "counter"})
	if err != nil {
		return err
	}
	count := &counter{changed: make(chan struct{})}
	go count.follow(p)
	if err := count.waitFor(ctx, 5); err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "rayito-demo-snapshot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	started := time.Now()
	// As a host does: the agent quiesces the sandbox first.
	if _, err := (client.Host{URL: v.AgentURL(), Token: token}).Pause(ctx, client.PauseOptions{Shrink: "cache"}); err != nil {
		return err
	}
	time.Sleep(reportDelay)
	if err := v.Snapshot(ctx, dir); err != nil {
		return err
	}
	before := count.last()
	step("snapshot in %s (the counter had printed %d); the VM is gone", time.Since(started).Round(time.Millisecond), before)
	port := v.HostPort()
	v.Close()

	restoreCfg := cfg
	restoreCfg.HostPort = port
	if cfg.WorkDir != "" {
		restoreCfg.WorkDir = filepath.Join(cfg.WorkDir, "restored")
		if err := os.MkdirAll(restoreCfg.WorkDir, 0o755); err != nil {
			return err
		}
	}
	started = time.Now()
	if cur, err = vm.Restore(ctx, restoreCfg, dir); err != nil {
		return err
	}
	if err := cur.WaitHealthy(ctx); err != nil {
		return err
	}
	entropy := make([]byte, 32)
	rand.Read(entropy)
	h, err := client.Host{URL: cur.AgentURL(), Token: token}.Resume(ctx, client.ResumeOptions{ResumeID: "demo-1", TimeUnixNs: time.Now().UnixNano(), Entropy: entropy})
	if err != nil {
		return err
	}
	step("restored from the snapshot in %s; POST /v1/resume: generation %d, kernel_state_lost %v",
		time.Since(started).Round(time.Millisecond), h.ResumeGeneration, h.KernelStateLost)

	if err := count.waitFor(ctx, before+5); err != nil {
		return err
	}
	step("the counter's stream reattached by itself: %d, then on to %d, no gap, no line twice", before, count.last())
	ex, err := k.Execute(ctx, "x", client.ExecuteOptions{})
	if err != nil || ex.Text() != "42" {
		return fmt.Errorf("x after the restore: %+v, %v", ex, err)
	}
	step(`run_code("x") after the restore: %s`, ex.Text())
	if h, err = c.Health(ctx); err != nil || h.ResumeGeneration != 1 || h.KernelStateLost {
		return fmt.Errorf("health after the restore: %+v, %v; want generation 1, no kernel state lost", h, err)
	}
	step("resume_generation %d, kernel_state_lost %v: the sandbox woke up just as it was", h.ResumeGeneration, h.KernelStateLost)
	return count.err()
}

// counter follows the counting command's stdout: every line must be the
// last plus one.
type counter struct {
	mu      sync.Mutex
	n       int
	bad     error
	changed chan struct{}
}

func (c *counter) follow(p *client.Process) {
	sc := bufio.NewScanner(p.Stdout())
	for sc.Scan() {
		got, err := strconv.Atoi(sc.Text())
		c.mu.Lock()
		if err != nil || got != c.n+1 {
			if c.bad == nil {
				c.bad = fmt.Errorf("the counter printed %q after %d: a gap or a repeat", sc.Text(), c.n)
			}
		} else {
			c.n = got
		}
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
	}
	c.mu.Lock()
	if c.bad == nil {
		c.bad = fmt.Errorf("the counter's stream ended after %d: %v", c.n, sc.Err())
	}
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

func (c *counter) last() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *counter) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bad
}

// waitFor waits until the counter printed n, or it failed.
func (c *counter) waitFor(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		got, bad, ch := c.n, c.bad, c.changed
		c.mu.Unlock()
		switch {
		case bad != nil:
			return bad
		case got >= n:
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("the counter printed %d, waiting for %d: %w", got, n, ctx.Err())
		}
	}
}
