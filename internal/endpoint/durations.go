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
