package envdapi

import (
	"encoding/json"
	"net/http"
)

// handleFiles is envd's file transfer route, GET (download) and POST
// (upload). It is not served yet: transfers belong to the file manager.
func (s *Server) handleFiles(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodPost:
		writeFilesError(w, http.StatusNotImplemented, "file transfers through /files are not implemented yet")
	default:
		w.Header().Set("Allow", "GET, POST")
		writeFilesError(w, http.StatusMethodNotAllowed, "/files takes GET or POST, not "+r.Method)
	}
}

// writeFilesError answers /files the way envd does: the HTTP status
// repeated as a number in a JSON body with a message.
func writeFilesError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"code": status, "message": msg})
}
