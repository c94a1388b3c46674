package surface

import (
	"encoding/json"
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
