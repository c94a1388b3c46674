package endpoint

import (
	"net/http"
	"strings"
	"testing"
)

// TestDurationMaxima: every duration parameter above its documented
// maximum is bad_request (it used to overflow: a command killed at once,
// a cell "timed out after 448µs", no grace at all); the maximum itself
// works as a long duration.
func TestDurationMaxima(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	rc := a.dial(t)
	never := t.TempDir() + "/never-written"
	for _, c := range []struct {
		name string
		req  map[string]any
	}{
		{"exec timeout_ms", map[string]any{"op": "exec", "argv": []string{"true"}, "timeout_ms": int64(18446744073710)}},
		{"exec timeout_ms just above", map[string]any{"op": "exec", "argv": []string{"true"}, "timeout_ms": maxDurationMs + 1}},
		{"exec grace_ms", map[string]any{"op": "exec", "argv": []string{"true"}, "grace_ms": int64(9223372036854775807)}},
		{"exec timeout_ms beyond 64 bits", map[string]any{"op": "exec", "argv": []string{"true"}, "timeout_ms": 1e20}},
		{"execute timeout_ms", map[string]any{"op": "execute", "code": "1", "timeout_ms": int64(18446744073710)}},
		{"file_read grace_ms", map[string]any{"op": "file_read", "path": "/etc/hostname", "grace_ms": int64(9223372036854775807)}},
		{"file_read grace_ms just above", map[string]any{"op": "file_read", "path": "/etc/hostname", "grace_ms": maxDurationMs + 1}},
		{"file_write grace_ms", map[string]any{"op": "file_write", "path": never, "grace_ms": int64(9223372036854775807)}},
		{"file_write grace_ms negative", map[string]any{"op": "file_write", "path": never, "grace_ms": -1}},
	} {
		r := rc.call(c.req)
		if errorCode(r) != "bad_request" {
			t.Errorf("%s: %v, want bad_request", c.name, r)
		}
	}
	// The maximum is a long time, not an instant.
	id := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"sh", "-c", "sleep 0.2; echo done"},
		"timeout_ms": maxDurationMs, "grace_ms": maxDurationMs}))
	if out, end := rc.collect(id); string(out["stdout"]) != "done\n" || end["exit_code"] != 0.0 {
		t.Fatalf("exec at the maximum timeout: %q %v", out["stdout"], end)
	}
	for _, body := range []string{`{"idle_policy": {"max_idle_seconds": 2592001}}`, `{"idle_policy": {"max_idle_seconds": 9223372036854775807}}`} {
		status, m := a.post(t, "/v1/init", testToken, body)
		if e, _ := m["error"].(map[string]any); status != http.StatusBadRequest || !strings.Contains(e["message"].(string), "30 days") {
			t.Errorf("init %s: %d %v", body, status, m)
		}
	}
	if status, _ := a.post(t, "/v1/init", testToken, `{"idle_policy": {"max_idle_seconds": 2592000}}`); status != http.StatusOK {
		t.Fatalf("init at the maximum idle policy: %d", status)
	}
}
