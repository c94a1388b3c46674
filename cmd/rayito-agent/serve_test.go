package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/stream"
)

// TestParseServe: defaults, environment variables and flags, and a clear
// error for each bad value.
func TestParseServe(t *testing.T) {
	c, err := parseServe(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.kernelCheck != resume.AutoKernelCheck() || !slices.Equal(c.adminGroups, []string{"sudo", "wheel"}) || c.maxIdle != 0 || !c.detectClock || c.maxHold != 8*time.Hour {
		t.Fatalf("defaults: %+v", c)
	}
	if c.retention.Budget != 0 || c.retention.MaxEnded != stream.DefaultMaxEnded {
		t.Fatalf("retention defaults: %+v", c.retention)
	}
	for v, want := range map[string]int64{"64MiB": 64 << 20, "1GiB": 1 << 30, "16M": 16 << 20, "9000000": 9000000, "12 mb": 12 << 20} {
		c, err := parseServe([]string{"--retention-budget", v, "--keep-ended", "5"})
		if err != nil || c.retention.Budget != want || c.retention.MaxEnded != 5 {
			t.Fatalf("--retention-budget %s: %+v, %v", v, c.retention, err)
		}
	}
	t.Setenv("RAYITO_RETENTION_BUDGET", "48MiB")
	if c, err := parseServe(nil); err != nil || c.retention.Budget != 48<<20 {
		t.Fatalf("budget from the environment: %+v, %v", c.retention, err)
	}

	t.Setenv("RAYITO_KERNEL_CHECK_TIMEOUT", "8s")
	t.Setenv("RAYITO_MAX_IDLE_SECONDS", "120")
	t.Setenv("RAYITO_MAX_HOLD_SECONDS", "1")
	c, err = parseServe(nil)
	if err != nil || c.kernelCheck != 8*time.Second || c.maxIdle != 120 || c.maxHold != time.Second {
		t.Fatalf("from the environment: %+v, %v", c, err)
	}
	c, err = parseServe([]string{"--kernel-check-timeout", "250ms", "--max-hold-seconds", "86400"})
	if err != nil || c.kernelCheck != 250*time.Millisecond || c.maxHold != 24*time.Hour {
		t.Fatalf("the flag wins over the environment: %+v, %v", c, err)
	}
	if c, err := parseServe([]string{"--user-memory-max", "256MiB", "--user-pids-max", "100", "--cgroups", "false"}); err != nil ||
		c.userLimits.MemoryMax != 256<<20 || c.userLimits.MemoryHigh == 0 || c.userLimits.MemoryHigh > 256<<20 || c.userLimits.PidsMax != 100 || c.cgroups != "false" {
		t.Fatalf("user limits: %+v, %v", c.userLimits, err)
	}
	if c, err := parseServe(nil); err != nil || c.memoryGuard != proc.DefaultMemoryGuard {
		t.Fatalf("the memory guard by default: %+v, %v", c.memoryGuard, err)
	}
	if c, err := parseServe([]string{"--user-memory-guard", "off"}); err != nil || !c.memoryGuard.Off {
		t.Fatalf("--user-memory-guard off: %+v, %v", c.memoryGuard, err)
	}
	if c, err := parseServe([]string{"--user-memory-guard", "60%/1m"}); err != nil || c.memoryGuard.Share != 0.6 || c.memoryGuard.For != time.Minute {
		t.Fatalf("--user-memory-guard 60%%/1m: %+v, %v", c.memoryGuard, err)
	}
	if c, err := parseServe([]string{"--kernel-check-timeout", "auto", "--admin-group", "none"}); err != nil || c.kernelCheck != resume.AutoKernelCheck() || c.adminGroups != nil {
		t.Fatalf("--kernel-check-timeout auto, --admin-group none: %+v, %v", c, err)
	}
	if c.maxKernels != 8 || c.kernelStart != 2*time.Minute {
		t.Fatalf("kernel defaults: %d kernels, %v to start", c.maxKernels, c.kernelStart)
	}
	t.Setenv("RAYITO_MAX_KERNELS", "3")
	t.Setenv("RAYITO_KERNEL_START_TIMEOUT", "5m")
	if c, err = parseServe(nil); err != nil || c.maxKernels != 3 || c.kernelStart != 5*time.Minute {
		t.Fatalf("kernel bounds from the environment: %+v, %v", c, err)
	}
	if c, err = parseServe([]string{"--max-kernels", "20", "--kernel-start-timeout", "30s"}); err != nil || c.maxKernels != 20 || c.kernelStart != 30*time.Second {
		t.Fatalf("kernel bounds from flags: %+v, %v", c, err)
	}

	for _, bad := range [][]string{
		{"--kernel-check-timeout", "soon"},
		{"--kernel-check-timeout", "0s"},
		{"--kernel-check-timeout", "1h"},
		{"--max-idle-seconds", "30"},
		{"--max-idle-seconds", "-60"},
		{"--max-hold-seconds", "0"},
		{"--max-hold-seconds", "-1"},
		{"--max-hold-seconds", "1.5"},
		{"--max-hold-seconds", "8h"},
		{"--max-hold-seconds", "99999999999"},
		{"--max-idle-seconds", "2592001"},
		{"--retention-budget", "lots"},
		{"--retention-budget", "1MiB"},
		{"--retention-budget", "64TB"},
		{"--retention-budget", "99999999999GiB"},
		{"--keep-ended", "0"},
		{"--keep-ended", "many"},
		{"--max-kernels", "0"},
		{"--max-kernels", "1025"},
		{"--max-kernels", "few"},
		{"--kernel-start-timeout", "5s"},
		{"--kernel-start-timeout", "2h"},
		{"--kernel-start-timeout", "120"},
		{"--cgroups", "maybe"},
		{"--user-memory-max", "lots"},
		{"--user-memory-max", "1MiB"},
		{"--user-memory-max", "64TiB"},
		{"--user-memory-high", "1MiB"},
		{"--user-memory-max", "256MiB", "--user-memory-high", "300MiB"},
		{"--user-pids-max", "3"},
		{"--hook-timeout", "50ms"},
		{"--admin-group", "sudo,,wheel"},
		{"--admin-group", ""},
		{"--hooks-total-timeout", "forever"},
		{"--hooks-total-timeout", "11m"},
		{"--user-pids-max", "many"},
		{"--user-cpu-weight", "0"},
		{"--user-io-weight", "20000"},
		{"--user-memory-guard", "40"},
		{"--user-memory-guard", "40%"},
		{"--user-memory-guard", "5%/30s"},
		{"--user-memory-guard", "40%/1s"},
		{"--user-memory-guard", "140%/30s"},
		{"--user-memory-guard", "40%/forever"},
		{"extra"},
	} {
		_, err := parseServe(bad)
		if err == nil {
			t.Errorf("%q accepted", bad)
			continue
		}
		if name := strings.TrimPrefix(bad[0], "--"); len(bad) == 2 && !strings.Contains(err.Error(), name) {
			t.Errorf("%q: error %q does not name the flag", bad, err)
		}
	}
}

// The envd API's open mode is off unless an operator asks for it, and
// so is the e2b control plane (make run asks for it).
func TestParseServeEnvdOpen(t *testing.T) {
	c, err := parseServe(nil)
	if err != nil || c.envdOpen || c.e2bAPI {
		t.Fatalf("open, or the e2b API on, by default: %+v, %v", c, err)
	}
	if c, err := parseServe([]string{"--e2b-api"}); err != nil || !c.e2bAPI {
		t.Fatalf("--e2b-api: %+v, %v", c, err)
	}
	t.Setenv("RAYITO_ENVD_OPEN", "true")
	if c, err = parseServe(nil); err != nil || !c.envdOpen {
		t.Fatalf("from the environment: %+v, %v", c, err)
	}
	if c, err = parseServe([]string{"--envd-open=false"}); err != nil || c.envdOpen {
		t.Fatalf("the flag wins over the environment: %+v, %v", c, err)
	}
}
