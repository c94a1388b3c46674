package main

import (
	"strings"
	"testing"
	"time"

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
	if c.kernelCheck != resume.DefaultKernelCheck || c.maxIdle != 0 || !c.detectClock {
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
	c, err = parseServe(nil)
	if err != nil || c.kernelCheck != 8*time.Second || c.maxIdle != 120 {
		t.Fatalf("from the environment: %+v, %v", c, err)
	}
	c, err = parseServe([]string{"--kernel-check-timeout", "250ms"})
	if err != nil || c.kernelCheck != 250*time.Millisecond {
		t.Fatalf("the flag wins over the environment: %+v, %v", c, err)
	}

	for _, bad := range [][]string{
		{"--kernel-check-timeout", "soon"},
		{"--kernel-check-timeout", "0s"},
		{"--kernel-check-timeout", "1h"},
		{"--max-idle-seconds", "30"},
		{"--max-idle-seconds", "-60"},
		{"--retention-budget", "lots"},
		{"--retention-budget", "1MiB"},
		{"--retention-budget", "64TB"},
		{"--retention-budget", "99999999999GiB"},
		{"--keep-ended", "0"},
		{"--keep-ended", "many"},
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
