package files

import (
	"testing"

	"github.com/rayito/rayito-agent/internal/wire"
)

// TestErrorCodes: every error kind has its protocol code, read by every
// surface through wire.AsError with the error's own message; a protocol
// error is kept as it is.
func TestErrorCodes(t *testing.T) {
	cases := []struct {
		kind error
		code wire.Code
	}{
		{ErrNotFound, wire.CodeNotFound},
		{ErrPermission, wire.CodePermissionDenied},
		{ErrExists, wire.CodeConflict},
		{ErrNotEmpty, wire.CodeConflict},
		{ErrWindow, wire.CodeLimit},
		{ErrNoSpace, wire.CodeLimit},
		{ErrTooMany, wire.CodeLimit},
		{ErrIsDir, wire.CodeBadRequest},
		{ErrUnsupported, wire.CodeBadRequest},
		{ErrClosed, wire.CodeUnavailable},
		{ErrIO, wire.CodeInternal},
	}
	for _, c := range cases {
		err := &Error{Op: "op", Path: "/p", Kind: c.kind}
		e := wire.AsError(err)
		if e.Code != c.code || e.Message != err.Error() {
			t.Errorf("%v: %+v", c.kind, e)
		}
	}
	if e := wire.AsError(wire.Errorf(wire.CodeConflict, "x")); e.Code != wire.CodeConflict {
		t.Fatalf("a protocol error is kept: %+v", e)
	}
}
