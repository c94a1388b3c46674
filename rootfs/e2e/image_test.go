package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// guestEnvFile is where rayito-init and rayito-agent.service read the
// agent's environment (see rootfs/overlay/etc/rayito-agent.env).
const guestEnvFile = "/etc/rayito-agent.env"

// tokenImage is the built image with an access token added to the agent's
// environment file, as an image builder or host would provision it. The
// copy is made once per test binary; the built image is never written.
type tokenImage struct {
	// env is more KEY=VALUE lines for the agent's environment file.
	env []string

	once  sync.Once
	dir   string
	path  string
	token string
	err   error
}

// tcgKernelCheck is the agent's --kernel-check-timeout in the test VMs.
const tcgKernelCheck = "10s"

// tcgKernelStart is the agent's --kernel-start-timeout in the test VMs.
// Under TCG a first kernel started in 13.6 s on a quiet host and took up
// to 1 min 57 s on a busy one, at the edge of the default 2 min: the
// bound is 5 min, times the host's load per CPU when that is above one
// (up to 3), read when the image is made.
func tcgKernelStart() string {
	d := 5 * time.Minute
	if l := loadPerCPU(); l > 1 {
		d = time.Duration(float64(d) * min(l, 3))
	}
	return d.Round(time.Second).String()
}

// loadPerCPU is the host's one-minute load average per CPU (0 if unknown).
func loadPerCPU() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var load float64
	if _, err := fmt.Sscan(string(b), &load); err != nil {
		return 0
	}
	return load / float64(runtime.NumCPU())
}

// prepare copies src (sparse) and appends RAYITO_ACCESS_TOKEN (the
// kernel check bound and ti.env) to the copy's environment file with debugfs, so both
// init integrations pass them on.
func (ti *tokenImage) prepare(src string) (path, token string, err error) {
	ti.once.Do(func() {
		ti.err = ti.build(src)
	})
	return ti.path, ti.token, ti.err
}

func (ti *tokenImage) build(src string) error {
	dir, err := os.MkdirTemp("", "rayito-e2e-image-")
	if err != nil {
		return err
	}
	ti.dir = dir
	var b [16]byte
	_, _ = rand.Read(b[:])
	ti.token = "e2e-" + hex.EncodeToString(b[:])
	img := filepath.Join(dir, "rootfs.ext4")
	if out, err := exec.Command("cp", "--sparse=always", "--reflink=auto", src, img).CombinedOutput(); err != nil {
		return fmt.Errorf("copy image: %w: %s", err, out)
	}
	env := filepath.Join(dir, "agent.env")
	if err := debugfs(img, false, "dump "+guestEnvFile+" "+env); err != nil {
		return err
	}
	old, err := os.ReadFile(env)
	if err != nil {
		return fmt.Errorf("the image has no %s: %w", guestEnvFile, err)
	}
	// The VMs run under software emulation (TCG), where a kernel restored
	// from a snapshot takes seconds to answer, not milliseconds as under
	// KVM: give the resume's kernel check the bound operations.md gives
	// for emulated VMs, so a slow kernel is not reported lost, and kernel
	// starts room that grows with the host's load.
	body := string(old) + "\n# Added by the end-to-end tests.\nRAYITO_ACCESS_TOKEN=" + ti.token +
		"\nRAYITO_KERNEL_CHECK_TIMEOUT=" + tcgKernelCheck + "\nRAYITO_KERNEL_START_TIMEOUT=" + tcgKernelStart() + "\n"
	for _, kv := range ti.env {
		body += kv + "\n"
	}
	if err := os.WriteFile(env, []byte(body), 0o600); err != nil {
		return err
	}
	// debugfs cannot overwrite: remove, write, then fix owner and mode.
	if err := debugfs(img, true,
		"rm "+guestEnvFile,
		"write "+env+" "+guestEnvFile,
		"sif "+guestEnvFile+" mode 0100600",
		"sif "+guestEnvFile+" uid 0",
		"sif "+guestEnvFile+" gid 0",
	); err != nil {
		return err
	}
	ti.path = img
	return nil
}

// cleanup removes the copy.
func (ti *tokenImage) cleanup() {
	if ti.dir != "" {
		_ = os.RemoveAll(ti.dir)
	}
}

// debugfs runs requests against an ext4 image; debugfs reports most
// failures on stderr with exit status 0, so any stderr line naming an
// error fails too.
func debugfs(img string, write bool, requests ...string) error {
	args := []string{"-f", "-"}
	if write {
		args = append([]string{"-w"}, args...)
	}
	cmd := exec.Command("debugfs", append(args, img)...)
	cmd.Stdin = strings.NewReader(strings.Join(requests, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("debugfs %v: %w: %s", requests, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, ": ") && !strings.HasPrefix(line, "debugfs") && !strings.HasPrefix(line, "Allocated inode") {
			return fmt.Errorf("debugfs %v: %s", requests, line)
		}
	}
	return nil
}
