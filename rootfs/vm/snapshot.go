package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// ErrSnapshot means QEMU could not save or load a snapshot.
var ErrSnapshot = errors.New("vm: snapshot failed")

// Files of a snapshot directory.
const (
	snapshotState    = "state"      // device state and memory (QEMU migration stream)
	snapshotDisk     = "disk.qcow2" // the VM's disk layer over the base image
	snapshotManifest = "manifest.json"
	manifestVersion  = 1
)

// Migration tuning: the guest is stopped while it is saved, so there is no
// reason to throttle (QEMU's default is 128 MiB/s).
const (
	migrateBandwidth = 16 << 30
	migratePoll      = 20 * time.Millisecond
)

type manifest struct {
	Version int       `json:"version"`
	Machine machine   `json:"machine"`
	Created time.Time `json:"created"`
}

// migrationStatus is the part of query-migrate we use.
type migrationStatus struct {
	Status    string `json:"status"`
	ErrorDesc string `json:"error-desc"`
}

// Snapshot saves the VM into dir (created if needed): the device state and
// memory, a copy of the disk layer and a manifest for Restore. The guest
// is paused first and stays paused: Resume continues it, Close ends it.
// The snapshot can be restored any number of times.
func (v *VM) Snapshot(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	state := filepath.Join(dir, snapshotState)
	started := time.Now()
	if err := v.qmp.execute(ctx, "stop", nil, nil); err != nil {
		return v.exitError(err)
	}
	if err := v.qmp.execute(ctx, "migrate-set-parameters", map[string]any{"max-bandwidth": migrateBandwidth}, nil); err != nil {
		return err
	}
	if err := v.qmp.execute(ctx, "migrate", map[string]any{"uri": "exec:cat > " + shellQuote(state)}, nil); err != nil {
		return v.exitError(err)
	}
	if err := v.waitMigration(ctx, "completed"); err != nil {
		return err
	}
	saved := time.Since(started)
	// QEMU flushed and released the disk when the migration completed.
	if err := copyFile(v.in.disk(), filepath.Join(dir, snapshotDisk)); err != nil {
		return fmt.Errorf("vm: copy disk layer: %w", err)
	}
	b, err := json.MarshalIndent(manifest{Version: manifestVersion, Machine: v.m, Created: time.Now().UTC()}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, snapshotManifest), b, 0o644); err != nil {
		return err
	}
	v.log.Info("snapshot", zap.String("dir", dir), zap.Duration("memory_saved", saved), zap.Duration("total", time.Since(started)))
	return nil
}

// waitMigration polls query-migrate until it reports want, fails, or ctx
// ends.
func (v *VM) waitMigration(ctx context.Context, want string) error {
	for {
		var st migrationStatus
		if err := v.qmp.execute(ctx, "query-migrate", nil, &st); err != nil {
			return v.exitError(err)
		}
		switch st.Status {
		case want:
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("%w: migration %s: %s", ErrSnapshot, st.Status, st.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: migration still %q: %w", ErrSnapshot, st.Status, ctx.Err())
		case <-v.exited:
			return v.exitError(ErrSnapshot)
		case <-time.After(migratePoll):
		}
	}
}

// Restore starts a new QEMU from the snapshot in dir, with a new VM
// generation id, and runs the guest. The machine (kernel, image, memory,
// CPUs, accelerator) comes from the snapshot; cfg gives only WorkDir,
// HostPort and Log. The snapshot directory is not modified.
func Restore(ctx context.Context, cfg Config, dir string) (*VM, error) {
	cfg = cfg.withDefaults()
	b, err := os.ReadFile(filepath.Join(dir, snapshotManifest))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSnapshot, err)
	}
	var man manifest
	if err := json.Unmarshal(b, &man); err != nil {
		return nil, fmt.Errorf("%w: manifest: %w", ErrSnapshot, err)
	}
	if man.Version != manifestVersion {
		return nil, fmt.Errorf("%w: manifest version %d, want %d", ErrSnapshot, man.Version, manifestVersion)
	}
	state, err := filepath.Abs(filepath.Join(dir, snapshotState))
	if err != nil {
		return nil, err
	}
	in, ownDir, err := newInstance(cfg)
	if err != nil {
		return nil, err
	}
	in.Incoming = "exec:cat " + shellQuote(state)
	if err := copyFile(filepath.Join(dir, snapshotDisk), in.disk()); err != nil {
		cleanupDir(in.Dir, ownDir)
		return nil, fmt.Errorf("vm: copy disk layer: %w", err)
	}
	v, err := start(ctx, cfg, man.Machine, in, ownDir)
	if err != nil {
		return nil, err
	}
	if err := v.runAfterIncoming(ctx); err != nil {
		v.Close()
		return nil, err
	}
	v.log.Info("restored", zap.String("snapshot", dir), zap.String("guid", in.GUID))
	return v, nil
}

// runAfterIncoming waits for QEMU to load the snapshot, then continues
// the guest if it is not running yet.
func (v *VM) runAfterIncoming(ctx context.Context) error {
	for {
		var st struct {
			Status string `json:"status"`
		}
		if err := v.qmp.execute(ctx, "query-status", nil, &st); err != nil {
			return v.exitError(err)
		}
		switch st.Status {
		case "running":
			return nil
		case "inmigrate":
		default:
			var ms migrationStatus
			if err := v.qmp.execute(ctx, "query-migrate", nil, &ms); err != nil {
				return v.exitError(err)
			}
			if ms.Status == "failed" {
				return fmt.Errorf("%w: incoming migration failed: %s", ErrSnapshot, ms.ErrorDesc)
			}
			return v.Resume(ctx)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: still loading: %w", ErrSnapshot, ctx.Err())
		case <-v.exited:
			return v.exitError(ErrSnapshot)
		case <-time.After(migratePoll):
		}
	}
}
