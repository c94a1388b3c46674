package vm

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

func TestCreateLayer(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base.raw")
	if err := os.WriteFile(base, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	layer := filepath.Join(dir, "layer.qcow2")
	if err := createLayer(context.Background(), base, layer); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(QEMUImg, "info", "--output=json", layer).Output()
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Format        string `json:"format"`
		Backing       string `json:"backing-filename"`
		BackingFormat string `json:"backing-filename-format"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatal(err)
	}
	if info.Format != "qcow2" || info.Backing != base || info.BackingFormat != "raw" {
		t.Errorf("layer %+v, want qcow2 over raw %s", info, base)
	}
}

// A kernel QEMU cannot load: Boot or WaitHealthy must report that QEMU
// exited, with its output, instead of waiting out the timeout.
func TestBootReportsQEMUExit(t *testing.T) {
	if _, err := exec.LookPath(DefaultQEMU); err != nil {
		t.Skip("no QEMU")
	}
	checkGoroutines(t)
	cfg := testFiles(t)
	cfg.Accel = AccelTCG
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := Boot(ctx, cfg)
	if err == nil {
		defer v.Close()
		err = v.WaitHealthy(ctx)
	}
	if !errors.Is(err, ErrExited) {
		t.Fatalf("err = %v, want ErrExited", err)
	}
	if ctx.Err() != nil {
		t.Errorf("took the whole timeout: %v", err)
	}
}

func TestRestoreNeedsASnapshot(t *testing.T) {
	_, err := Restore(context.Background(), Config{}, t.TempDir())
	if !errors.Is(err, ErrSnapshot) {
		t.Errorf("err = %v, want ErrSnapshot", err)
	}
}

// checkGoroutines fails the test if it leaves more goroutines running than
// it found (the VM's wait goroutine, QMP dial watchers, HTTP connections).
func checkGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				t.Errorf("%d goroutines left, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}
