package surface

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/rayito/rayito-agent/internal/wire"
)

// WriteJSON answers with v as JSON, never cached.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// WriteError answers with the agent's own error body,
// {"error": {"code", "message"}}: the native and host routes' format.
func WriteError(w http.ResponseWriter, status int, e *wire.Error) {
	WriteJSON(w, status, map[string]*wire.Error{"error": e})
}

// WriteErr answers err with its status (Status) in the agent's format.
func WriteErr(w http.ResponseWriter, err error) {
	WriteError(w, Status(err), wire.AsError(err))
}

// DecodeObject decodes b, a JSON object, into v strictly: anything but an
// object (null, an array, a string) is refused, and so are fields v does
// not have and data after the object, so that a misspelt or misplaced
// field is an error rather than ignored. An empty b leaves v as it is.
func DecodeObject(b []byte, v any) *wire.Error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil
	}
	if b[0] != '{' {
		return wire.Errorf(wire.CodeBadRequest, "the body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return wire.Errorf(wire.CodeBadRequest, "malformed body: %s", wire.DescribeJSON(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return wire.Errorf(wire.CodeBadRequest, "malformed body: data after the JSON object")
	}
	return nil
}
