package client_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/internal/resume"
)

// cutter cuts a client's connection at random moments, as a network that
// drops (a proxy that resets the TCP connection) and as resumes do (the
// agent closes with 4000), until it has cut n times.
type cutter struct {
	done chan struct{}
	cuts atomic.Int32
	wg   sync.WaitGroup
}

func startCutter(t *testing.T, a *agent, proxy *tcpProxy, n int) *cutter {
	ct := &cutter{done: make(chan struct{})}
	ct.wg.Add(1)
	go func() {
		defer ct.wg.Done()
		defer close(ct.done)
		for int(ct.cuts.Load()) < n {
			time.Sleep(time.Duration(1+rand.IntN(12)) * time.Millisecond)
			if rand.IntN(2) == 0 {
				proxy.cut()
			} else {
				a.resume.Resume(context.Background(), resume.Report{Source: resume.SourceHost})
			}
			ct.cuts.Add(1)
		}
	}()
	t.Cleanup(ct.wg.Wait)
	return ct
}

func (ct *cutter) running() bool {
	select {
	case <-ct.done:
		return false
	default:
		return true
	}
}

// exactlyOnce runs calls that change something in a loop while the
// connection is cut a thousand times at random points: every call must
// succeed, and have run exactly once.
func exactlyOnce(t *testing.T, noOpIDs bool) error {
	a := newAgent(t)
	proxy := newTCPProxy(t, a.http.Listener.Addr().String())
	c := dialURL(t, proxy.url(), client.Options{})
	if noOpIDs {
		client.SendNoOpIDs(c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	k, err := c.StartKernel(ctx, client.KernelOptions{})
	if err != nil {
		return err
	}
	if _, err := k.Execute(ctx, "n = 0", client.ExecuteOptions{}); err != nil {
		return err
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	ct := startCutter(t, a, proxy, 1000)
	defer func() {
		for ct.running() {
			proxy.cut() // hasten the end: the cutter stops at its count
			ct.cuts.Add(1)
		}
	}()
	var execs, runs, writes int
	for i := 0; ct.running(); i++ {
		switch i % 3 {
		case 0:
			p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"sh", "-c", fmt.Sprintf("echo %d >> %s", i, log)}})
			if err != nil {
				return fmt.Errorf("exec %d after %d cuts: %w", i, ct.cuts.Load(), err)
			}
			st, err := p.Wait(ctx)
			if err != nil || st.Code == nil || *st.Code != 0 {
				return fmt.Errorf("exec %d: %+v %v", i, st, err)
			}
			execs++
		case 1:
			e, err := k.Execute(ctx, "n += 1", client.ExecuteOptions{})
			if err != nil || e.Status != "ok" {
				return fmt.Errorf("run %d after %d cuts: %+v %w", i, ct.cuts.Load(), e, err)
			}
			runs++
		case 2:
			from, to := filepath.Join(dir, fmt.Sprintf("w%d", i)), filepath.Join(dir, fmt.Sprintf("m%d", i))
			if err := c.Files().WriteFile(ctx, from, []byte(fmt.Sprint(i)), 0); err != nil {
				return fmt.Errorf("write %d after %d cuts: %w", i, ct.cuts.Load(), err)
			}
			if err := c.Files().Move(ctx, from, to); err != nil {
				return fmt.Errorf("move %d after %d cuts: %w", i, ct.cuts.Load(), err)
			}
			writes++
		}
	}
	b, err := os.ReadFile(log)
	if err != nil {
		return err
	}
	if lines := strings.Count(string(b), "\n"); lines != execs {
		return fmt.Errorf("%d commands succeeded, the file has %d lines", execs, lines)
	}
	e, err := k.Execute(ctx, "print(n)", client.ExecuteOptions{})
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(e.Stdout); got != fmt.Sprint(runs) {
		return fmt.Errorf("%d cells of n += 1 succeeded, n is %s", runs, got)
	}
	moved, _ := filepath.Glob(filepath.Join(dir, "m*"))
	left, _ := filepath.Glob(filepath.Join(dir, "w*"))
	if len(moved) != writes || len(left) != 0 {
		return fmt.Errorf("%d writes and moves succeeded: %d files moved, %d left behind", writes, len(moved), len(left))
	}
	t.Logf("%d cuts: %d commands, %d cells, %d writes and moves", ct.cuts.Load(), execs, runs, writes)
	return nil
}

// TestCallsSurviveCutsExactlyOnce: calls that change something run
// exactly once and succeed, whatever cuts their connection.
func TestCallsSurviveCutsExactlyOnce(t *testing.T) {
	t.Parallel()
	if err := exactlyOnce(t, false); err != nil {
		t.Fatal(err)
	}
}

// TestCallsFailAcrossCutsWithoutOpIDs shows what op ids prevent: without
// them the same loop loses calls (or runs them twice).
func TestCallsFailAcrossCutsWithoutOpIDs(t *testing.T) {
	t.Parallel()
	err := exactlyOnce(t, true)
	if err == nil {
		t.Fatal("a thousand cuts without op ids lost no call and ran none twice")
	}
	if !errors.Is(err, client.ErrConnectionLost) && !strings.Contains(err.Error(), "succeeded") {
		t.Fatalf("without op ids: %v", err)
	}
	t.Logf("without op ids, as expected: %v", err)
}
