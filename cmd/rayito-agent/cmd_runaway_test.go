package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRunawayRefusesWithoutIsolation: the runaway load is real, so an
// agent whose user work has no cgroup (this machine's) is refused before
// anything starts; bad flags are refused too. (The load itself runs in the
// VM: rootfs/e2e's TestAgentKeepsItsFooting drives the same package.)
func TestRunawayRefusesWithoutIsolation(t *testing.T) {
	url := startAgent(t, "cli-token")
	t.Setenv("RAYITO_ACCESS_TOKEN", "cli-token")
	var out, errb bytes.Buffer
	code := runRunaway([]string{"--url", url, "--for", "1s"}, &out, &errb)
	if code != exitClientError || !strings.Contains(errb.String(), "not isolated") || out.Len() != 0 {
		t.Fatalf("runaway against an agent without isolation: exit %d, out %q, err %q", code, out.String(), errb.String())
	}
	for _, args := range [][]string{{"--for", "0s"}, {"--for", "1h"}, {"extra"}} {
		var out, errb bytes.Buffer
		if code := runRunaway(append([]string{"--url", url}, args...), &out, &errb); code != 2 {
			t.Errorf("runaway %q: exit %d, %s", args, code, errb.String())
		}
	}
}
