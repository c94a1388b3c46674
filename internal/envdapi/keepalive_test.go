package envdapi

import (
	"net/http"
	"testing"
	"time"
)

// TestKeepaliveInterval: Keepalive-Ping-Interval in seconds, at least 1 s
// and at most an hour; a value whose nanoseconds overflow does not wrap
// around to some other interval.
func TestKeepaliveInterval(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		header string
		want   time.Duration
	}{
		{"", defaultKeepalive},
		{"50", 50 * time.Second},
		{"0", defaultKeepalive},
		{"-3", defaultKeepalive},
		{"x", defaultKeepalive},
		{"3600", time.Hour},
		{"3601", maxKeepalive},
		{"18446744074", maxKeepalive},         // wrapped to 0.29 s
		{"9223372036854775807", maxKeepalive}, // wrapped to -1 s
		{"99999999999999999999", defaultKeepalive},
	} {
		h := http.Header{}
		if c.header != "" {
			h.Set(keepaliveHeader, c.header)
		}
		if got := keepaliveInterval(h); got != c.want {
			t.Errorf("Keepalive-Ping-Interval %q: %v, want %v", c.header, got, c.want)
		}
	}
}
