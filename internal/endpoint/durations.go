package endpoint

import (
	"time"

	"github.com/rayito/rayito-agent/internal/wire"
)

// maxDurationMs bounds every duration parameter in milliseconds (30
// days). Far beyond any real use, and far from where milliseconds turned
// into nanoseconds overflow: an overflowed timeout would fire at once.
const maxDurationMs = 30 * 24 * 60 * 60 * 1000

// durationMs checks a duration parameter given in milliseconds.
func durationMs(name string, ms int64) (time.Duration, error) {
	if ms < 0 {
		return 0, wire.Errorf(wire.CodeBadRequest, "%s must not be negative", name)
	}
	if ms > maxDurationMs {
		return 0, wire.Errorf(wire.CodeBadRequest, "%s must be at most %d (30 days), got %d", name, maxDurationMs, ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// graceParam checks a grace_ms parameter: absent is the default grace
// (0), an explicit 0 none at all (-1).
func graceParam(ms *int64) (time.Duration, error) {
	if ms == nil {
		return 0, nil
	}
	grace, err := durationMs("grace_ms", *ms)
	if grace == 0 && err == nil {
		grace = -1
	}
	return grace, err
}
