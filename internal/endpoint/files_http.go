package endpoint

import (
	"errors"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/files"
	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/wire"
)

// fileQuery reads a files route's query, refusing parameters the route
// does not take (as ops refuse unknown fields).
func fileQuery(r *http.Request, allowed ...string) (map[string]string, *wire.Error) {
	q := map[string]string{}
	for k, vs := range r.URL.Query() {
		if k == "access_token" {
			continue
		}
		known := false
		for _, a := range allowed {
			known = known || a == k
		}
		if !known {
			return nil, wire.Errorf(wire.CodeBadRequest, "unknown query parameter %q (takes %s)", k, strings.Join(allowed, ", "))
		}
		if len(vs) != 1 {
			return nil, wire.Errorf(wire.CodeBadRequest, "query parameter %q given %d times", k, len(vs))
		}
		q[k] = vs[0]
	}
	return q, nil
}

func writeFileError(w http.ResponseWriter, err error) { surface.WriteErr(w, err) }

func (s *Server) filesReady(w http.ResponseWriter) bool {
	if s.cfg.Files == nil {
		writeError(w, http.StatusNotImplemented, wire.Errorf(wire.CodeUnsupported, "files are not available in this agent"))
		return false
	}
	return true
}

// handleFileGet downloads a file (Range and HEAD as net/http serves
// them), or a directory as a tar archive with format=tar.
func (s *Server) handleFileGet(w http.ResponseWriter, r *http.Request) {
	if !s.filesReady(w) {
		return
	}
	q, qerr := fileQuery(r, "path", "user", "format")
	if qerr != nil {
		writeError(w, surface.Status(qerr), qerr)
		return
	}
	if q["path"] == "" {
		writeError(w, http.StatusBadRequest, wire.Errorf(wire.CodeBadRequest, "missing path"))
		return
	}
	switch q["format"] {
	case "":
	case "tar":
		s.serveTar(w, r, q)
		return
	default:
		writeError(w, http.StatusBadRequest, wire.Errorf(wire.CodeBadRequest, "format must be \"tar\" (for a directory), got %q", q["format"]))
		return
	}
	f, err := s.cfg.Files.Open(surface.ClientOf(r), q["user"], q["path"])
	if errors.Is(err, files.ErrIsDir) {
		writeError(w, http.StatusBadRequest, wire.Errorf(wire.CodeBadRequest, "%v: add format=tar to download it as a tar archive", err))
		return
	}
	if err != nil {
		writeFileError(w, err)
		return
	}
	defer f.Close()
	f.Serve(w, r)
}

func (s *Server) serveTar(w http.ResponseWriter, r *http.Request, q map[string]string) {
	info, err := s.cfg.Files.Stat(q["user"], q["path"])
	if err != nil {
		writeFileError(w, err)
		return
	}
	if info.Type != files.TypeDir {
		// A symlink to a directory is archived as the directory.
		if info.Type != files.TypeSymlink {
			writeError(w, http.StatusBadRequest, wire.Errorf(wire.CodeBadRequest, "%s is not a directory: format=tar is for directories", info.Path))
			return
		}
	}
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(info.Path) + ".tar"}))
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	if err := s.cfg.Files.WriteTar(surface.ClientOf(r), q["user"], info.Path, w); err != nil {
		s.log.Debug("tar download failed", zap.Error(err))
		// The status is sent: abort the response so the client sees a
		// failed transfer, not an archive with files missing.
		panic(http.ErrAbortHandler)
	}
}

// uploadOptions reads the write options of PUT and POST.
func uploadOptions(q map[string]string) (files.WriteOptions, *wire.Error) {
	o := files.WriteOptions{Parents: true}
	for _, b := range []struct {
		name string
		to   *bool
	}{{"parents", &o.Parents}, {"append", &o.Append}, {"exclusive", &o.Exclusive}} {
		if v, ok := q[b.name]; ok {
			parsed, err := strconv.ParseBool(v)
			if err != nil {
				return o, wire.Errorf(wire.CodeBadRequest, "%s must be true or false, got %q", b.name, v)
			}
			*b.to = parsed
		}
	}
	if v, ok := q["mode"]; ok {
		m, err := parseMode(v)
		if err != nil || m > 0o7777 {
			return o, wire.Errorf(wire.CodeBadRequest, "mode must be octal, such as 644, got %q", v)
		}
		o.Mode = m
	}
	return o, nil
}

// fileWritten is what an upload answers for each file.
type fileWritten struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// handleFilePut writes the request body to the file at path, atomically.
func (s *Server) handleFilePut(w http.ResponseWriter, r *http.Request) {
	if !s.filesReady(w) {
		return
	}
	q, qerr := fileQuery(r, "path", "user", "mode", "parents", "append", "exclusive")
	if qerr == nil && q["path"] == "" {
		qerr = wire.Errorf(wire.CodeBadRequest, "missing path")
	}
	o, oerr := uploadOptions(q)
	if qerr == nil {
		qerr = oerr
	}
	if qerr != nil {
		writeError(w, surface.Status(qerr), qerr)
		return
	}
	up := s.cfg.Files.Stage(q["user"], o)
	defer up.Abort()
	if err := up.Add(q["path"], r.Body); err != nil {
		surface.DrainBody(w, r)
		writeFileError(w, err)
		return
	}
	committed, err := up.Commit()
	if err != nil {
		surface.DrainBody(w, r)
		writeFileError(w, err)
		return
	}
	c := committed[0]
	status := http.StatusOK
	if c.Created {
		status = http.StatusCreated
	}
	writeJSON(w, status, fileWritten{Path: c.Path, Size: c.Size, SHA256: c.SHA256})
}

// handleFilePost writes each file part of a multipart body to the path its
// filename names (relative to ?path= when given). Every file is staged
// first; they are committed together (files.Batch) once the whole body
// arrived, so a failure changes none of them.
func (s *Server) handleFilePost(w http.ResponseWriter, r *http.Request) {
	if !s.filesReady(w) {
		return
	}
	q, qerr := fileQuery(r, "path", "user", "mode", "parents", "append", "exclusive")
	o, oerr := uploadOptions(q)
	if qerr == nil {
		qerr = oerr
	}
	if qerr != nil {
		writeError(w, surface.Status(qerr), qerr)
		return
	}
	mr, err := r.MultipartReader()
	if err != nil {
		writeError(w, http.StatusBadRequest, wire.Errorf(wire.CodeBadRequest, "POST /v1/files takes multipart/form-data: %v", err))
		return
	}
	up := s.cfg.Files.Stage(q["user"], o)
	defer up.Abort()
	var committed []files.Committed
	err = up.Multipart(mr, func(n int, part *multipart.Part) (string, bool, error) {
		name := files.PartFilename(part)
		switch {
		case name == "":
			return "", false, wire.Errorf(wire.CodeBadRequest, "part %d (%q) has no filename: each part's filename is its target path", n, part.FormName())
		case q["path"] == "":
			return name, true, nil
		}
		target, err := files.Within(q["path"], name)
		return target, err == nil, err
	})
	if err == nil {
		committed, err = up.Commit()
	}
	if err != nil {
		surface.DrainBody(w, r)
		writeFileError(w, err)
		return
	}
	out := make([]fileWritten, 0, len(committed))
	status := http.StatusOK
	for _, c := range committed {
		if c.Created {
			status = http.StatusCreated
		}
		out = append(out, fileWritten{Path: c.Path, Size: c.Size, SHA256: c.SHA256})
	}
	writeJSON(w, status, map[string]any{"files": out})
}
