package envdapi

import (
	"testing"

	"github.com/rayito/rayito-agent/internal/wire"
)

// TestConnectCodesCoverTheProtocol: every protocol code has its Connect
// code, so no manager's error reaches an SDK as a bare internal error.
func TestConnectCodesCoverTheProtocol(t *testing.T) {
	for _, code := range wire.Codes {
		if _, ok := connectCodes[code]; !ok {
			t.Errorf("no Connect code for %s", code)
		}
	}
	if len(connectCodes) != len(wire.Codes) {
		t.Errorf("%d Connect codes for %d protocol codes", len(connectCodes), len(wire.Codes))
	}
}
