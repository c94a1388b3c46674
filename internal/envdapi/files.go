package envdapi

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/rayito/rayito-agent/internal/files"
)

// handleFiles is envd's file transfer route: GET (and HEAD) downloads a
// file, POST uploads files. Both run as ?username= (the default user
// without it) on the file manager; auth has passed already.
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
	f, err := s.cfg.Files.Open(q.Get("username"), path)
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
	u := uploader{s: s, user: q.Get("username"), metadata: metadataHeaders(r.Header)}
	defer u.abort()
	media, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case media == "application/octet-stream":
		if q.Get("path") == "" {
			err = &statusError{http.StatusBadRequest, errors.New("an application/octet-stream upload needs the path query parameter")}
		} else {
			err = u.file(q.Get("path"), body)
		}
	case strings.HasPrefix(media, "multipart/") && params["boundary"] != "":
		err = u.multipart(q.Get("path"), multipart.NewReader(body, params["boundary"]))
	default:
		err = &statusError{http.StatusBadRequest, fmt.Errorf("unsupported Content-Type %q: send multipart/form-data or application/octet-stream", r.Header.Get("Content-Type"))}
	}
	var out []writtenFile
	if err == nil {
		out, err = u.commit()
	}
	if err != nil {
		writeFileStatus(w, err)
		return
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

// uploader holds the files of one upload until they are committed.
type uploader struct {
	s        *Server
	user     string
	metadata map[string]string
	staged   files.Batch
}

// multipart stages every part named "file"; other form fields are
// skipped, as envd does.
func (u *uploader) multipart(path string, mr *multipart.Reader) error {
	for n := 1; ; n++ {
		part, err := mr.NextPart()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return &statusError{http.StatusBadRequest, fmt.Errorf("reading part %d of the multipart body: %v", n, err)}
		}
		if part.FormName() != "file" {
			continue
		}
		target := path
		if target == "" {
			target = partFilename(part.Header.Get("Content-Disposition"))
		}
		if target == "" {
			return &statusError{http.StatusBadRequest, fmt.Errorf("part %d has no filename and the request no path: one of them names the file", n)}
		}
		if err := u.file(target, part); err != nil {
			return err
		}
	}
}

// file stages one file with the content r yields.
func (u *uploader) file(path string, r io.Reader) error {
	fw, err := u.s.cfg.Files.Create(u.user, path, files.WriteOptions{Parents: true, Metadata: u.metadata,
		NoHash: true}) // envd answers no checksum
	if err != nil {
		return err
	}
	if err := u.staged.Add(fw); err != nil {
		return err
	}
	if _, err := io.Copy(fw, r); err != nil {
		var fe *files.Error
		if errors.As(err, &fe) {
			return err
		}
		return &statusError{http.StatusBadRequest, fmt.Errorf("reading the body of %s: %v", path, err)}
	}
	return nil
}

// commit puts every staged file in place, all or none (see files.Batch).
func (u *uploader) commit() ([]writtenFile, error) {
	committed, err := u.staged.Commit()
	if err != nil {
		return nil, err
	}
	out := make([]writtenFile, 0, len(committed))
	for _, c := range committed {
		out = append(out, writtenFile{Name: filepath.Base(c.Path), Path: c.Path, Type: "file", Metadata: u.metadata})
	}
	return out, nil
}

// abort drops whatever was not committed.
func (u *uploader) abort() { u.staged.Abort() }

// partFilename is a part's filename as sent: multipart.Part.FileName keeps
// only its last element, and here it is a path.
func partFilename(disposition string) string {
	_, params, err := mime.ParseMediaType(disposition)
	if err != nil {
		return ""
	}
	return params["filename"]
}

// statusError is a failure of the request itself, with its HTTP status.
type statusError struct {
	status int
	err    error
}

func (e *statusError) Error() string { return e.err.Error() }

// fileStatuses map the file manager's errors to /files statuses, first
// match first (507 is what the SDK turns into NotEnoughSpaceError).
var fileStatuses = []struct {
	kind   error
	status int
}{
	{files.ErrNotFound, http.StatusNotFound},
	{files.ErrNotDir, http.StatusBadRequest},
	{files.ErrExists, http.StatusConflict},
	{files.ErrPermission, http.StatusForbidden},
	{files.ErrIsDir, http.StatusBadRequest},
	{files.ErrNotRegular, http.StatusBadRequest},
	{files.ErrInvalid, http.StatusBadRequest},
	{files.ErrUnknownUser, http.StatusBadRequest},
	{files.ErrUnsupported, http.StatusBadRequest},
	{files.ErrNoSpace, http.StatusInsufficientStorage},
	{files.ErrTooMany, http.StatusBadRequest}, // not 507: the SDK says NotEnoughSpaceError
	{files.ErrClosed, http.StatusServiceUnavailable},
}

// writeFileStatus answers /files with the status of err.
func writeFileStatus(w http.ResponseWriter, err error) {
	var se *statusError
	if errors.As(err, &se) {
		writeFilesError(w, se.status, se.Error())
		return
	}
	for _, c := range fileStatuses {
		if errors.Is(err, c.kind) {
			writeFilesError(w, c.status, err.Error())
			return
		}
	}
	writeFilesError(w, http.StatusInternalServerError, err.Error())
}

// writeFilesError answers /files the way envd does: the HTTP status
// repeated as a number in a JSON body with a message.
func writeFilesError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"code": status, "message": msg})
}
