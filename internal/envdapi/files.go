package envdapi

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/rayito/rayito-agent/internal/files"
	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/wire"
)

// handleFiles is envd's file transfer route: GET (and HEAD) downloads a
// file, POST uploads files. Both run with the agent's rights on behalf of
// ?username= (the default user without it; behalf.go): what an upload
// creates is theirs. Auth has passed already.
func (s *Server) handleFiles(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		s.download(w, r)
	case http.MethodPost:
		s.upload(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		writeFilesError(w, http.StatusMethodNotAllowed, "/files takes GET or POST, not "+r.Method)
	}
}

// download sends a regular file's bytes with their length (Range and
// conditional requests as net/http serves them).
func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	path := q.Get("path")
	if path == "" {
		writeFilesError(w, http.StatusBadRequest, "the path query parameter is required")
		return
	}
	b, err := s.onBehalf(q.Get("username"))
	if err != nil {
		writeFileStatus(w, err)
		return
	}
	f, err := s.cfg.Files.Open(surface.ClientOf(r), b.as, b.path(path))
	if err != nil {
		writeFileStatus(w, err)
		return
	}
	defer f.Close()
	f.Serve(w, r)
}

// writtenFile is what POST /files answers for each file, as envd does.
type writtenFile struct {
	Name     string            `json:"name"`
	Path     string            `json:"path"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// metadataPrefix starts the headers that carry a file's metadata, one
// key each ("X-Metadata-Author: mish"); keys are lowercased, as HTTP
// header names are not case-sensitive.
const metadataPrefix = "x-metadata-"

// metadataHeaders reads the metadata an upload gives every file it
// writes; nil without any.
func metadataHeaders(h http.Header) map[string]string {
	var md map[string]string
	for name, values := range h {
		key := strings.ToLower(name)
		if !strings.HasPrefix(key, metadataPrefix) || len(key) == len(metadataPrefix) || len(values) == 0 {
			continue
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key[len(metadataPrefix):]] = values[0]
	}
	return md
}

// upload writes files from a multipart body (each part named "file" goes
// to ?path= when given, else to the path its filename names) or from a
// raw application/octet-stream body (to ?path=). Parent directories are
// created, existing files replaced; X-Metadata-KEY headers give every
// file metadata (replacing any it had). Every file is written to a temporary
// file first and they are committed together once the whole body has
// arrived, so a failed upload changes none of them.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	body, err := decodedBody(r)
	if err != nil {
		writeFilesError(w, http.StatusBadRequest, err.Error())
		return
	}
	defer body.Close()
	b, err := s.onBehalf(q.Get("username"))
	if err != nil {
		writeFileStatus(w, err)
		return
	}
	metadata := metadataHeaders(r.Header)
	up := s.cfg.Files.Stage(b.as, files.WriteOptions{Parents: true, Metadata: metadata, Owner: b.owner,
		NoHash: true}) // envd answers no checksum
	defer up.Abort()
	media, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	read := false // whether the body was read from: an early answer then drains it
	switch {
	case media == "application/octet-stream":
		if q.Get("path") == "" {
			err = wire.Errorf(wire.CodeBadRequest, "an application/octet-stream upload needs the path query parameter")
		} else {
			read = true
			err = up.Add(b.path(q.Get("path")), body)
		}
	case strings.HasPrefix(media, "multipart/") && params["boundary"] != "":
		read = true
		// Every part named "file" goes to ?path= when given, else to the
		// path its filename names; other form fields are skipped, as envd
		// does.
		err = up.Multipart(multipart.NewReader(body, params["boundary"]), func(n int, part *multipart.Part) (string, bool, error) {
			if part.FormName() != "file" {
				return "", false, nil
			}
			target := q.Get("path")
			if target == "" {
				target = files.PartFilename(part)
			}
			if target == "" {
				return "", false, wire.Errorf(wire.CodeBadRequest, "part %d has no filename and the request no path: one of them names the file", n)
			}
			return b.path(target), true, nil
		})
	default:
		err = wire.Errorf(wire.CodeBadRequest, "unsupported Content-Type %q: send multipart/form-data or application/octet-stream", r.Header.Get("Content-Type"))
	}
	var committed []files.Committed
	if err == nil {
		committed, err = up.Commit()
	}
	if err != nil {
		if read {
			surface.DrainBody(w, r)
		}
		writeFileStatus(w, err)
		return
	}
	out := make([]writtenFile, 0, len(committed))
	for _, c := range committed {
		out = append(out, writtenFile{Name: filepath.Base(c.Path), Path: c.Path, Type: "file", Metadata: metadata})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	json.NewEncoder(w).Encode(out)
}

// decodedBody is the request's body without its Content-Encoding (the
// SDK gzips uploads when asked to).
func decodedBody(r *http.Request) (io.ReadCloser, error) {
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return r.Body, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, fmt.Errorf("the body is not gzip as its Content-Encoding says: %v", err)
		}
		return zr, nil
	default:
		return nil, fmt.Errorf("unsupported Content-Encoding %q: send gzip or none", enc)
	}
}

// writeFileStatus answers /files with the status of err (surface.Status:
// 507 for a full disk is what the SDK turns into NotEnoughSpaceError).
func writeFileStatus(w http.ResponseWriter, err error) {
	writeFilesError(w, surface.Status(err), err.Error())
}

// writeFilesError answers /files the way envd does: the HTTP status
// repeated as a number in a JSON body with a message.
func writeFilesError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"code": status, "message": msg})
}
