package client

import (
	"errors"
	"fmt"
	"io/fs"
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrConnectionLost fails a call that was in flight when the connection
	// dropped (it may or may not have reached the agent), and every handle
	// once reconnecting gave up. Calls that are safe to repeat (attach,
	// list) are retried on the new connection instead.
	ErrConnectionLost = errors.New("client: connection to the agent lost")
	// ErrClosed is returned once Close has been called.
	ErrClosed = errors.New("client: closed")
	// ErrUnauthorized is returned by Dial when the agent refuses the token.
	ErrUnauthorized = errors.New("client: access token refused (HTTP 401)")
	// ErrAgentRestarted fails every handle that was live when the client
	// reconnected to a new run of the agent (another instance): that
	// agent's streams ended with it, and output not yet received is lost.
	// The client itself goes on working with the new agent.
	ErrAgentRestarted = errors.New("client: the agent restarted: its streams ended and output not yet received is lost")
	// ErrDetached is returned by a handle's readers and Wait after Detach.
	ErrDetached = errors.New("client: detached from the stream")
	// ErrProtocol means the agent sent something the protocol forbids,
	// such as data at an unexpected offset; the affected handle fails.
	ErrProtocol = errors.New("client: protocol violation")
	// ErrStreamFailed is returned by Wait when the stream ended with
	// reason "error".
	ErrStreamFailed = errors.New("client: stream ended with an error")
	// ErrCallbackOwnsOutput is returned by the reader of a channel whose
	// output goes to a callback (ExecOptions.OnStdout or OnStderr).
	ErrCallbackOwnsOutput = errors.New("client: channel output goes to a callback")
	// ErrNoDefaultKernel is returned by Interrupt, Restart and Shutdown of
	// DefaultKernel before any cell of this client named its id.
	ErrNoDefaultKernel = errors.New("client: the default kernel's id is not known yet (run a cell first)")
)

// Code is a protocol error code (section 2 of the protocol).
type Code string

// The protocol's error codes.
const (
	CodeBadRequest  Code = "bad_request"
	CodeNotFound    Code = "not_found"
	CodeConflict    Code = "conflict"
	CodeUnsupported Code = "unsupported"
	CodeLimit       Code = "limit"
	CodeUnavailable Code = "unavailable"
	CodeInternal    Code = "internal"
	// CodePermissionDenied: the user the op ran as may not do it.
	CodePermissionDenied Code = "permission_denied"
	// CodeExpired: a call's request ran on the agent, but the agent no
	// longer keeps its outcome to answer the call with (opid.go).
	CodeExpired Code = "expired"
	// CodeUnauthenticated: the access token is missing or wrong (HTTP
	// routes; a websocket dial fails with HTTP 401 instead).
	CodeUnauthenticated Code = "unauthenticated"
)

// Error is an error the agent answered with.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// Stream is set for error events about one stream, such as refused
	// input.
	Stream uint64 `json:"-"`
}

func (e *Error) Error() string { return "agent: " + string(e.Code) + ": " + e.Message }

// Is lets errors.Is match file errors with the io/fs ones:
// fs.ErrNotExist for CodeNotFound, fs.ErrPermission for
// CodePermissionDenied.
func (e *Error) Is(target error) bool {
	switch target {
	case fs.ErrNotExist:
		return e.Code == CodeNotFound
	case fs.ErrPermission:
		return e.Code == CodePermissionDenied
	}
	return false
}

// HasCode reports whether err is an agent *Error with the given code.
func HasCode(err error, code Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// GapError is returned once by a channel's reader at the position where
// the agent announced that data is gone (dropped before this client read
// it). The next Read continues with the data after the gap.
type GapError struct {
	Stream   uint64
	Channel  string
	From, To uint64 // bytes (or event seqs) [From, To) are missing
}

func (e *GapError) Error() string {
	return fmt.Sprintf("client: stream %d %s: positions [%d, %d) were dropped by the agent", e.Stream, e.Channel, e.From, e.To)
}

func protocolErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}
