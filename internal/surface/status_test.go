package surface

import (
	"fmt"
	"net/http"
	"os"
	"syscall"
	"testing"

	"github.com/rayito/rayito-agent/internal/wire"
)

// TestStatus: every protocol code has its one status; a limit met
// because the disk is full is 507, whatever wraps it; an error without a
// code is internal.
func TestStatus(t *testing.T) {
	t.Parallel()
	for code, want := range map[wire.Code]int{
		wire.CodeBadRequest: 400, wire.CodeNotFound: 404, wire.CodePermissionDenied: 403,
		wire.CodeConflict: 409, wire.CodeUnsupported: 501, wire.CodeLimit: 429,
		wire.CodeUnavailable: 503, wire.CodeInternal: 500, wire.CodeExpired: 410,
	} {
		if got := StatusOf(code); got != want {
			t.Errorf("%s: %d, want %d", code, got, want)
		}
	}
	// The table has every code of the protocol, and nothing else.
	for _, code := range wire.Codes {
		if _, ok := statuses[code]; !ok {
			t.Errorf("no status for code %s", code)
		}
	}
	if len(statuses) != len(wire.Codes) {
		t.Errorf("%d statuses for %d codes", len(statuses), len(wire.Codes))
	}
	full := fmt.Errorf("write /x: %w", &codedErr{code: wire.CodeLimit, err: &os.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}})
	if got := Status(full); got != http.StatusInsufficientStorage {
		t.Errorf("a full disk: %d, want 507", got)
	}
	if got := Status(fmt.Errorf("plain")); got != 500 {
		t.Errorf("an error without a code: %d, want 500", got)
	}
}

// codedErr is an error that knows its code, as the managers' do.
type codedErr struct {
	code wire.Code
	err  error
}

func (e *codedErr) Error() string       { return e.err.Error() }
func (e *codedErr) Unwrap() error       { return e.err }
func (e *codedErr) WireCode() wire.Code { return e.code }
