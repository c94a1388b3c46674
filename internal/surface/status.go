package surface

import (
	"errors"
	"net/http"
	"syscall"

	"github.com/rayito/rayito-agent/internal/wire"
)

// statuses is the HTTP status of each protocol error code, on every
// surface that answers over plain HTTP.
var statuses = map[wire.Code]int{
	wire.CodeBadRequest:       http.StatusBadRequest,
	wire.CodeNotFound:         http.StatusNotFound,
	wire.CodePermissionDenied: http.StatusForbidden,
	wire.CodeConflict:         http.StatusConflict,
	wire.CodeUnsupported:      http.StatusNotImplemented,
	wire.CodeLimit:            http.StatusTooManyRequests,
	wire.CodeUnavailable:      http.StatusServiceUnavailable,
	wire.CodeInternal:         http.StatusInternalServerError,
	wire.CodeExpired:          http.StatusGone,
	wire.CodeUnauthenticated:  http.StatusUnauthorized,
}

// Status is the HTTP status that answers err: its protocol code's
// (wire.AsError), except that a limit met because the disk or a quota is
// full is 507 Insufficient Storage, which clients (E2B's SDK among them)
// tell from being asked to slow down.
func Status(err error) int {
	code := wire.AsError(err).Code
	if code == wire.CodeLimit && storageFull(err) {
		return http.StatusInsufficientStorage
	}
	if s, ok := statuses[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// StatusOf is the HTTP status of a bare code.
func StatusOf(code wire.Code) int { return Status(&wire.Error{Code: code}) }

func storageFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EFBIG)
}
