package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Code is a protocol error code. The set is closed: SDKs branch on it.
type Code string

const (
	CodeBadRequest  Code = "bad_request"
	CodeNotFound    Code = "not_found"
	CodeConflict    Code = "conflict"
	CodeUnsupported Code = "unsupported"
	CodeLimit       Code = "limit"
	CodeUnavailable Code = "unavailable"
	CodeInternal    Code = "internal"
	// CodePermissionDenied: the user an op runs as may not do it.
	CodePermissionDenied Code = "permission_denied"
	// CodeExpired: a request repeats an op_id whose request ran, but
	// whose outcome the agent no longer keeps. It is not run again.
	CodeExpired Code = "expired"
	// CodeUnauthenticated: the request carries no access token, or a
	// wrong one (HTTP routes only: a websocket is refused before it opens).
	CodeUnauthenticated Code = "unauthenticated"
)

// Codes are every error code of the protocol.
var Codes = []Code{CodeBadRequest, CodeNotFound, CodeConflict, CodeUnsupported, CodeLimit, CodeUnavailable, CodeInternal, CodePermissionDenied, CodeExpired, CodeUnauthenticated}

// Error is an error that carries its protocol code. Handlers return it so
// the endpoint can answer with the right code; any other error is internal.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Errorf builds an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Coded is an error of a manager's own type that knows its protocol code
// (files' errors, say): the manager owns the mapping, and every surface
// reads it through AsError.
type Coded interface {
	error
	WireCode() Code
}

// AsError returns err as a protocol error, mapping anything unknown to
// internal so that no error leaves the agent without a code.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var c Coded
	if errors.As(err, &c) {
		return &Error{Code: c.WireCode(), Message: err.Error()}
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}

// Request is a decoded control frame sent by a client.
type Request struct {
	ID    uint64
	HasID bool
	Op    string
	// OpID is the client's name for the request (section 11.13), "" if
	// it gave none: a repeat of it gets the first answer, never a second
	// execution.
	OpID string
	// Instance, when set, is the agent run the client meant the request
	// for (section 11.9).
	Instance    string
	HasInstance bool
	// Raw is the whole frame; an op handler decodes its own parameters
	// from it, so parameters sit beside "id" and "op" as the protocol says.
	Raw json.RawMessage
}

type requestHead struct {
	ID       json.RawMessage `json:"id"`
	Op       *string         `json:"op"`
	OpID     json.RawMessage `json:"op_id"`
	Instance json.RawMessage `json:"instance"`
}

// MaxOpID is the longest op_id, in bytes: room for a UUID, or a client's
// own prefix and a counter.
const MaxOpID = 64

// ValidOpID says what is wrong with an op_id, or nil: 1 to MaxOpID
// characters of ASCII letters, digits, '-', '_', '.' and ':' (a UUID, a
// base64url string, a prefix and a counter).
func ValidOpID(id string) error {
	if id == "" || len(id) > MaxOpID {
		return Errorf(CodeBadRequest, "op_id must be 1 to %d characters, got %d", MaxOpID, len(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return Errorf(CodeBadRequest, "op_id may hold ASCII letters, digits, '-', '_', '.' and ':', got %q at byte %d", c, i)
		}
	}
	return nil
}

// DecodeRequest parses a text frame. On error, the returned Request still
// carries the id when one could be read, so the error can be answered.
func DecodeRequest(msg []byte) (Request, error) {
	var r Request
	if len(msg) > MaxControl {
		return r, Errorf(CodeLimit, "control frame of %d bytes exceeds %d", len(msg), MaxControl)
	}
	trimmed := bytes.TrimSpace(msg)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return r, Errorf(CodeBadRequest, "control frame must be a JSON object")
	}
	var head requestHead
	if err := json.Unmarshal(trimmed, &head); err != nil {
		return r, Errorf(CodeBadRequest, "malformed JSON: %v", err)
	}
	if len(head.ID) > 0 && string(head.ID) != "null" {
		id, err := strconv.ParseUint(string(head.ID), 10, 64)
		if err != nil {
			return r, Errorf(CodeBadRequest, "id must be an unsigned integer, got %s", head.ID)
		}
		r.ID, r.HasID = id, true
	}
	if head.Op == nil || *head.Op == "" {
		return r, Errorf(CodeBadRequest, "missing op")
	}
	r.Op = *head.Op
	if head.OpID != nil {
		if err := json.Unmarshal(head.OpID, &r.OpID); err != nil {
			return r, Errorf(CodeBadRequest, "op_id must be a string, got %s", head.OpID)
		}
		if err := ValidOpID(r.OpID); err != nil {
			return r, err
		}
	}
	if head.Instance != nil {
		if err := json.Unmarshal(head.Instance, &r.Instance); err != nil {
			return r, Errorf(CodeBadRequest, "instance must be a string, got %s", head.Instance)
		}
		r.HasInstance = true
	}
	r.Raw = trimmed
	return r, nil
}

// Envelope holds the fields every request may carry (id, op, op_id,
// instance); op parameter structs embed it so that Params accepts them.
type Envelope struct {
	ID       json.RawMessage `json:"id,omitempty"`
	Op       string          `json:"op,omitempty"`
	OpID     json.RawMessage `json:"op_id,omitempty"`
	Instance json.RawMessage `json:"instance,omitempty"`
}

// Response encodes a successful response. A nil result encodes as {}.
func Response(id uint64, result any) ([]byte, error) {
	if result == nil {
		result = struct{}{}
	}
	return json.Marshal(struct {
		ID     uint64 `json:"id"`
		Result any    `json:"result"`
	}{id, result})
}

// ErrorResponse encodes an error response to the request with the given id.
func ErrorResponse(id uint64, e *Error) []byte {
	b, _ := json.Marshal(struct {
		ID    uint64 `json:"id"`
		Error *Error `json:"error"`
	}{id, e})
	return b
}

// ErrorEvent encodes an error that cannot be tied to a request id.
func ErrorEvent(e *Error) []byte {
	b, _ := json.Marshal(struct {
		Event string `json:"event"`
		Error *Error `json:"error"`
	}{"error", e})
	return b
}

// Message is a control frame as a client sees it: a response (ID set) or an
// event (Event set). Result and the rest of an event stay raw.
type Message struct {
	ID     *uint64         `json:"id,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
	Event  string          `json:"event,omitempty"`
	Stream uint64          `json:"stream,omitempty"`
}

// DecodeMessage parses a control frame received by a client.
func DecodeMessage(msg []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(msg, &m); err != nil {
		return m, fmt.Errorf("wire: malformed control frame: %w", err)
	}
	if m.ID == nil && m.Event == "" {
		return m, errors.New("wire: control frame is neither a response nor an event")
	}
	return m, nil
}
