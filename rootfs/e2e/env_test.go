package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/rootfs/vm"
	"go.uber.org/zap/zaptest"
)

// Generous limits: TCG on a busy two-core machine.
const (
	bootTimeout    = 4 * time.Minute
	restoreTimeout = 2 * time.Minute
	opTimeout      = 45 * time.Second
)

// image is the token-provisioned copy of the built image, shared by every
// test of this binary and removed by TestMain.
var image tokenImage

func TestMain(m *testing.M) {
	code := m.Run()
	image.cleanup()
	soakImage.cleanup()
	noReseedImage.cleanup()
	isolationImage.cleanup()
	noCgroupsImage.cleanup()
	timings.writeIfAsked()
	os.Exit(code)
}

// buildDir finds the image artifacts: RAYITO_BUILD_DIR, else build/ at the
// module root.
func buildDir(t *testing.T) string {
	if d := os.Getenv("RAYITO_BUILD_DIR"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "build")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test directory")
		}
		dir = parent
	}
}

// testVM is what a test needs to boot the image and talk to its agent.
type testVM struct {
	cfg   vm.Config
	token string
}

// vmConfig returns the Config for the built image (provisioned with an
// access token), or skips the test if there is none (fails instead with
// RAYITO_E2E=1).
func vmConfig(t *testing.T) testVM {
	t.Helper()
	return vmConfigOf(t, &image)
}

// vmConfigOf is vmConfig with the image provisioned as ti says.
func vmConfigOf(t *testing.T, ti *tokenImage) testVM {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end VM test (-short)")
	}
	cfg := vm.BuildConfig(buildDir(t))
	for _, f := range []string{cfg.Kernel, cfg.Initrd, cfg.Image} {
		if _, err := os.Stat(f); err != nil {
			if os.Getenv("RAYITO_E2E") == "1" {
				t.Fatalf("RAYITO_E2E=1 but the image is missing (make image): %v", err)
			}
			t.Skipf("no VM image (make image, or RAYITO_E2E=1 to require it): %v", err)
		}
	}
	started := time.Now()
	img, token, err := ti.prepare(cfg.Image)
	if err != nil {
		t.Fatalf("provision the image with a token: %v", err)
	}
	if took := time.Since(started); took > 10*time.Millisecond {
		t.Logf("timing: image copied and provisioned with a token in %s", took.Round(time.Millisecond))
	}
	cfg.Image = img
	cfg.Log = zaptest.NewLogger(t)
	return testVM{cfg: cfg, token: token}
}

// bootHealthy boots a VM, waits for the agent and closes the VM when the
// test ends. On failure the console log is in the error.
func bootHealthy(t *testing.T, cfg vm.Config) *vm.VM {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	started := time.Now()
	v, err := vm.Boot(ctx, cfg)
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	t.Cleanup(func() { v.Close() })
	logConsoleOnFailure(t, v)
	if err := v.WaitHealthy(ctx); err != nil {
		t.Fatalf("boot: %v", err)
	}
	took := time.Since(started)
	timings.add(t, fmt.Sprintf("boot to /health 200 (%s, %s, %d MiB, %d vCPU)", initName(cfg.Init), v.Accel(), memOf(cfg), cpusOf(cfg)), took)
	return v
}

func initName(init string) string {
	if init == vm.InitSystemd {
		return "systemd"
	}
	return "rayito-init"
}

func cpusOf(cfg vm.Config) int {
	if cfg.CPUs == 0 {
		return vm.DefaultCPUs
	}
	return cfg.CPUs
}

func memOf(cfg vm.Config) int {
	if cfg.MemoryMiB == 0 {
		return vm.DefaultMemoryMiB
	}
	return cfg.MemoryMiB
}

// logConsoleOnFailure prints the end of the guest console if the test
// failed (or RAYITO_E2E_CONSOLE=1), which is where the init and the agent
// log.
func logConsoleOnFailure(t *testing.T, v *vm.VM) {
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("RAYITO_E2E_CONSOLE") == "1" {
			t.Logf("console of %s:\n%s", v.Dir(), v.SerialTail())
		}
	})
}

func opContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}
