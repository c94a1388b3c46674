package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/rootfs/vm"
)

// guestFile is a file the test writes before the snapshot and expects back.
type guestFile struct {
	path string
	data []byte
}

var beforeSnapshot = []guestFile{
	{"/home/user/on-disk.txt", []byte("on the disk before the snapshot\n")},
	// /tmp is a tmpfs: this one survives only if memory was restored.
	{"/tmp/in-memory.txt", []byte("only in guest memory\n")},
}

func TestSnapshotRestore(t *testing.T) {
	cfg := vmConfig(t)
	orig, _ := bootHealthy(t, cfg)
	logConsoleOnFailure(t, orig)
	ctx := opContext(t)
	before, err := getHealth(ctx, orig.AgentURL())
	if err != nil {
		t.Fatal(err)
	}
	ops := opsFor(t, orig.AgentURL(), before)
	for _, f := range beforeSnapshot {
		if err := ops.WriteFile(ctx, f.path, f.data); err != nil {
			t.Fatalf("write %s: %v", f.path, err)
		}
	}

	snap := t.TempDir()
	started := time.Now()
	if err := orig.Snapshot(ctx, snap); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	took := time.Since(started)
	t.Logf("timing: snapshot %s, state %s, disk layer %s", took.Round(time.Millisecond),
		fileSize(t, filepath.Join(snap, "state")), fileSize(t, filepath.Join(snap, "disk.qcow2")))

	// The original goes on after the snapshot; what it writes from now on
	// must not leak into the snapshot's disk.
	if err := orig.Resume(ctx); err != nil {
		t.Fatalf("resume the original: %v", err)
	}
	if _, err := getHealth(ctx, orig.AgentURL()); err != nil {
		t.Fatalf("original after snapshot: %v", err)
	}
	const afterPath = "/home/user/after-snapshot.txt"
	if err := ops.WriteFile(ctx, afterPath, []byte("too late\n")); err != nil {
		t.Fatal(err)
	}
	if err := orig.Close(); err != nil {
		t.Fatal(err)
	}

	// A snapshot restores any number of times, each time to the same state.
	for i := 1; i <= 2; i++ {
		v := restoreHealthy(t, cfg, snap)
		rctx := opContext(t)
		h, err := getHealth(rctx, v.AgentURL())
		if err != nil {
			t.Fatal(err)
		}
		if before.Instance != "" && h.Instance != before.Instance {
			t.Errorf("restore %d: agent instance %q, want %q (it restarted instead of resuming)", i, h.Instance, before.Instance)
		}
		if h.UptimeMS < before.UptimeMS {
			t.Errorf("restore %d: uptime %d ms < %d ms before the snapshot: the guest rebooted", i, h.UptimeMS, before.UptimeMS)
		}
		if v.GUID() == orig.GUID() {
			t.Errorf("restore %d: VM generation id unchanged", i)
		}
		rops := opsFor(t, v.AgentURL(), h)
		for _, f := range beforeSnapshot {
			got, err := rops.ReadFile(rctx, f.path)
			if err != nil || !bytes.Equal(got, f.data) {
				t.Errorf("restore %d: %s = %q, %v; want %q", i, f.path, got, err, f.data)
			}
		}
		if _, err := rops.ReadFile(rctx, afterPath); !errors.Is(err, errNotFound) {
			t.Errorf("restore %d: %s written by the original after the snapshot: err = %v, want not found", i, afterPath, err)
		}
		if err := rops.WriteFile(rctx, afterPath, []byte("restore writes its own layer\n")); err != nil {
			t.Errorf("restore %d: write: %v", i, err)
		}
		if err := v.Close(); err != nil {
			t.Error(err)
		}
	}
}

// restoreHealthy restores snap and waits for the agent.
func restoreHealthy(t *testing.T, cfg vm.Config, snap string) *vm.VM {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), restoreTimeout)
	defer cancel()
	started := time.Now()
	v, err := vm.Restore(ctx, cfg, snap)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	t.Cleanup(func() { v.Close() })
	logConsoleOnFailure(t, v)
	running := time.Since(started)
	if err := v.WaitHealthy(ctx); err != nil {
		t.Fatalf("restore: %v", err)
	}
	t.Logf("timing: restore to running %s, to healthy %s", running.Round(time.Millisecond), time.Since(started).Round(time.Millisecond))
	return v
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
