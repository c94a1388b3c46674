package envdapi

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/rayito/rayito-agent/internal/wire"
)

// connectCodes maps the managers' error codes to Connect's, which the SDK
// turns into its own errors (not_found into NotFoundError, and so on).
var connectCodes = map[wire.Code]connect.Code{
	wire.CodeBadRequest:  connect.CodeInvalidArgument,
	wire.CodeNotFound:    connect.CodeNotFound,
	wire.CodeConflict:    connect.CodeFailedPrecondition,
	wire.CodeUnsupported: connect.CodeUnimplemented,
	wire.CodeLimit:       connect.CodeResourceExhausted,
	wire.CodeUnavailable: connect.CodeUnavailable,
	wire.CodeInternal:    connect.CodeInternal,
	// envd answers a file operation the user may not do so.
	wire.CodePermissionDenied: connect.CodePermissionDenied,
	// An op_id's outcome let go: envd's API has no op_ids, so this is
	// never met there; it ran, and the call cannot be answered.
	wire.CodeExpired: connect.CodeFailedPrecondition,
	// Refused before any handler (auth.go); listed for completeness.
	wire.CodeUnauthenticated: connect.CodeUnauthenticated,
}

// connectError turns a manager's error into a Connect error with the
// matching code; anything without a code is internal.
func connectError(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	we := wire.AsError(err)
	code, ok := connectCodes[we.Code]
	if !ok {
		code = connect.CodeInternal
	}
	return connect.NewError(code, errors.New(we.Message))
}

func errorf(code connect.Code, format string, args ...any) error {
	return connect.NewError(code, fmt.Errorf(format, args...))
}

// streamContextError is how a stream ends when its request context does:
// its deadline (Connect-Timeout-Ms) or the client going away.
func streamContextError(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return errDeadline()
	}
	return connect.NewError(connect.CodeCanceled, ctx.Err())
}

func errDeadline() error {
	return errorf(connect.CodeDeadlineExceeded, "the request's timeout (Connect-Timeout-Ms) was reached")
}
