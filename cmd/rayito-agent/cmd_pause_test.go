package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestPauseCommand: pause quiesces and prints the steps; --abort calls it
// off (the same generation); an abort without a pause, a bad shrink and
// a wrong token fail with the agent's reason.
func TestPauseCommand(t *testing.T) {
	url := startAgent(t, "cli-token")
	t.Setenv("RAYITO_ACCESS_TOKEN", "cli-token")
	pause := func(args ...string) (int, map[string]any, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := runPause(append([]string{"--url", url}, args...), &out, &errb)
		var m map[string]any
		if code == 0 {
			if err := json.Unmarshal(out.Bytes(), &m); err != nil {
				t.Fatalf("%s: %v", out.String(), err)
			}
		}
		return code, m, errb.String()
	}
	code, a, errs := pause("--shrink", "cache", "--deadline", "20s")
	if code != 0 || a["state"] != "paused" || a["shrink"] != "cache" || len(a["steps"].([]any)) != 5 {
		t.Fatalf("pause: exit %d, %v, %s", code, a, errs)
	}
	if code, a, errs = pause("--abort"); code != 0 || a["state"] != "running" || a["generation"] != float64(0) {
		t.Fatalf("pause --abort: exit %d, %v, %s", code, a, errs)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--abort"}, "no pause to abort"},
		{[]string{"--shrink", "lots"}, "shrink must be none, cache or all"},
		{[]string{"--thaw-after", "1ms"}, "thaw_after_ms must be 1000"},
	} {
		if code, _, errs := pause(tc.args...); code != 1 || !strings.Contains(errs, tc.want) {
			t.Errorf("pause %v: exit %d, %q; want 1 saying %q", tc.args, code, errs, tc.want)
		}
	}
	t.Setenv("RAYITO_ACCESS_TOKEN", "wrong")
	if code, _, errs := pause(); code != 1 || !strings.Contains(errs, "401") {
		t.Errorf("wrong token: exit %d, %q", code, errs)
	}
}
