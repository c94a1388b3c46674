package files

import (
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"path"
	"strings"

	"github.com/rayito/rayito-agent/internal/wire"
)

// Staged is one HTTP upload of one or more files, as every surface's
// upload route takes it: each file is written to a temporary file as its
// part arrives (as the user, with the options given), and Commit puts
// them all in place together (Batch), so a failed upload changes none of
// them. A Staged is used by one goroutine; call Abort when done (after a
// Commit it does nothing).
type Staged struct {
	m    *Manager
	user string
	opts WriteOptions
	b    Batch
}

// Stage starts an upload as user with the options o for every file.
func (m *Manager) Stage(user string, o WriteOptions) *Staged {
	return &Staged{m: m, user: user, opts: o}
}

// Add stages the file at path with what r yields. A body that fails to
// arrive is the client's problem (bad_request); a write that fails is the
// file's (its *Error).
func (s *Staged) Add(path string, r io.Reader) error {
	fw, err := s.m.Create(s.user, path, s.opts)
	if err != nil {
		return err
	}
	if err := s.b.Add(fw); err != nil {
		return err
	}
	if _, err := io.Copy(fw, r); err != nil {
		var fe *Error
		if errors.As(err, &fe) {
			return err
		}
		return wire.Errorf(wire.CodeBadRequest, "reading the body of %s: %v", path, err)
	}
	return nil
}

// PartTarget names the file of a multipart part: its path, or ok false
// to skip the part.
type PartTarget func(n int, p *multipart.Part) (path string, ok bool, err error)

// Multipart stages the parts of mr that target names, in order.
func (s *Staged) Multipart(mr *multipart.Reader, target PartTarget) error {
	for n := 1; ; n++ {
		part, err := mr.NextPart()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return wire.Errorf(wire.CodeBadRequest, "reading part %d of the multipart body: %v", n, err)
		}
		p, ok, err := target(n, part)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := s.Add(p, part); err != nil {
			return err
		}
	}
}

// Commit puts every staged file in place (see Batch).
func (s *Staged) Commit() ([]Committed, error) { return s.b.Commit() }

// Abort drops whatever was not committed.
func (s *Staged) Abort() { s.b.Abort() }

// PartFilename is a part's filename as sent: multipart.Part.FileName
// keeps only its last element, and an upload's part names a path.
func PartFilename(p *multipart.Part) string {
	_, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

// Within is name inside the directory dir: a name that would leave it
// ("../x", "a/../../x") is refused with bad_request, so that an upload
// into a directory writes nowhere else; a leading "/" is taken as
// relative to dir.
func Within(dir, name string) (string, error) {
	depth := 0
	for _, elem := range strings.Split(name, "/") {
		switch elem {
		case "", ".":
		case "..":
			if depth--; depth < 0 {
				return "", wire.Errorf(wire.CodeBadRequest, "%q leaves the directory %s it is uploaded into", name, dir)
			}
		default:
			depth++
		}
	}
	return path.Join(dir, path.Clean("/"+name)), nil
}
