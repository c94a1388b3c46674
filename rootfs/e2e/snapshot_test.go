package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/rootfs/vm"
)

// TestSnapshotRestore: files written before a snapshot (on disk and in
// memory) are there after each of two restores of it, the agent resumed
// rather than restarted, and what the original VM did after the snapshot
// is not in it.
func TestSnapshotRestore(t *testing.T) {
	tv := vmConfig(t)
	orig := bootHealthy(t, tv.cfg)
	ctx := opContext(t)
	c := dial(t, ctx, orig.AgentURL(), tv.token, client.Options{})
	g := guest{c}
	files := filesBeforeSnapshot("once")
	for _, f := range files {
		if err := g.WriteFile(ctx, f.path, f.data); err != nil {
			t.Fatal(err)
		}
	}
	agentPid, err := g.agentPid(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before, err := c.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}

	snap := t.TempDir()
	stopped := snapshot(t, orig, snap)

	// The original goes on after the snapshot; what it writes from now on
	// must not leak into the snapshot's disk.
	if err := orig.Resume(ctx); err != nil {
		t.Fatalf("resume the original: %v", err)
	}
	const afterPath = "/home/user/after-snapshot.txt"
	for {
		// A snapshot that kept the guest stopped past the clock-jump
		// threshold makes the original detect a resume too and cut the
		// connection, failing a command in flight; writing is idempotent.
		err := g.WriteFile(ctx, afterPath, []byte("too late\n"))
		if err == nil {
			break
		}
		if !errors.Is(err, client.ErrConnectionLost) || ctx.Err() != nil {
			t.Fatal(err)
		}
		t.Logf("original after the snapshot: %v; again", err)
	}
	c.Close()
	if err := orig.Close(); err != nil {
		t.Fatal(err)
	}
	// Restore later than the guest's clock-jump threshold, so that it
	// notices by itself (Debian 12's kernel has no VMGenID uevent).
	time.Sleep(time.Until(stopped.Add(stoppedFor)))

	// A snapshot restores any number of times, each time to the same state.
	for i := 1; i <= 2; i++ {
		v, _ := restoreHealthy(t, t, tv.cfg, snap)
		rctx := opContext(t)
		h := waitGeneration(t, rctx, v.AgentURL(), tv.token, nil, 1)
		rc := dial(t, rctx, v.AgentURL(), tv.token, client.Options{})
		rg := guest{rc}
		if h.UptimeMs < before.UptimeMs {
			t.Errorf("restore %d: agent uptime %d ms < %d ms before the snapshot: it restarted", i, h.UptimeMs, before.UptimeMs)
		}
		if v.GUID() == orig.GUID() {
			t.Errorf("restore %d: VM generation id unchanged", i)
		}
		if pid, err := rg.agentPid(rctx); err != nil || pid != agentPid {
			t.Errorf("restore %d: agent pid %d (%v), want %d from before the snapshot", i, pid, err, agentPid)
		}
		rg.checkFiles(t, rctx, files)
		if _, err := rg.ReadFile(rctx, afterPath); !errors.Is(err, errNotFound) {
			t.Errorf("restore %d: %s written by the original after the snapshot: err = %v, want not found", i, afterPath, err)
		}
		if err := rg.WriteFile(rctx, afterPath, []byte("restore writes its own layer\n")); err != nil {
			t.Errorf("restore %d: write: %v", i, err)
		}
		rc.Close()
		if err := v.Close(); err != nil {
			t.Error(err)
		}
	}
}

// snapshot saves v into dir (v stays paused) and records the timings.
func snapshot(t *testing.T, v *vm.VM, dir string) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), restoreTimeout)
	defer cancel()
	started := time.Now()
	if err := v.Snapshot(ctx, dir); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	took := time.Since(started)
	state, disk := fileSize(t, filepath.Join(dir, "state")), fileSize(t, filepath.Join(dir, "disk.qcow2"))
	timings.add(t, "snapshot (stop, save memory and devices, copy disk layer)", took)
	timings.addValue(t, "snapshot size: memory and devices", state)
	timings.addValue(t, "snapshot size: disk layer", disk)
	return started
}

// restoreHealthy restores snap and waits for the agent. The VM is closed
// when owner (t or a parent of it) ends.
func restoreHealthy(t, owner *testing.T, cfg vm.Config, snap string) (*vm.VM, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), restoreTimeout)
	defer cancel()
	started := time.Now()
	v, err := vm.Restore(ctx, cfg, snap)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	owner.Cleanup(func() { v.Close() })
	// On t, not owner: a cycle's VM is closed by the next one.
	logConsoleOnFailure(t, v)
	running := time.Since(started)
	if err := v.WaitHealthy(ctx); err != nil {
		t.Fatalf("restore: %v", err)
	}
	healthy := time.Since(started)
	timings.add(t, "restore to running (new QEMU, load, cont)", running)
	timings.add(t, "restore to /health 200", healthy)
	return v, started
}

// waitGeneration polls /health over plain HTTP until the agent reports
// generation gen (it detects a restore by itself, without a host call)
// and returns it. Websocket connections opened from then on are not cut
// by that resume: the agent cuts those opened before it published gen.
func waitGeneration(t *testing.T, ctx context.Context, url, token string, hc *http.Client, gen uint64) client.Health {
	t.Helper()
	h, err := awaitGeneration(ctx, url, token, hc, gen)
	if err != nil {
		t.Fatal(err)
	}
	if h.ResumeGeneration != gen {
		t.Fatalf("resume generation %d, want %d: %+v", h.ResumeGeneration, gen, h)
	}
	return h
}

// awaitGeneration returns the health (all of it: with the token) once
// the agent reports generation gen or later.
func awaitGeneration(ctx context.Context, url, token string, hc *http.Client, gen uint64) (client.Health, error) {
	var h client.Health
	var err error
	for {
		h, err = client.Host{URL: url, Token: token, HTTPClient: hc}.Health(ctx)
		if err == nil && h.ResumeGeneration >= gen {
			return h, nil
		}
		select {
		case <-ctx.Done():
			return h, fmt.Errorf("the agent did not report resume generation %d by itself: last health %+v, %v", gen, h, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func fileSize(t *testing.T, path string) string {
	st, err := os.Stat(path)
	if err != nil {
		t.Errorf("snapshot file: %v", err)
		return "?"
	}
	return mib(st.Size())
}

func mib(n int64) string {
	return fmtFloat(float64(n)/(1<<20)) + " MiB"
}
