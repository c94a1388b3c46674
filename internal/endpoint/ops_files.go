package endpoint

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/rayito/rayito-agent/internal/files"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// What an upload's Control implements beyond InputCloser: input tied to
// the connection that sends it, and a reattach that takes it over.
type (
	// SessionInput takes IN frames and knows which connection sent them.
	SessionInput interface {
		WriteInputFrom(from any, p []byte) error
	}
	// InputTakeOver makes a connection that attaches the one whose input
	// counts, and says how much input arrived and was written so far.
	InputTakeOver interface {
		TakeOver(from any) (received, written int64)
	}
	// Abandoner gives a stream up when the connection that owns it
	// detaches (an upload then removes its temporary file at once).
	Abandoner interface {
		Abandon(from any)
	}
)

// fileInfo is an entry of file_stat and file_list.
type fileInfo struct {
	Name          string `json:"name"`
	Path          string `json:"path"`
	Type          string `json:"type"`
	Size          int64  `json:"size"`
	Mode          uint32 `json:"mode"`
	Permissions   string `json:"permissions"`
	Owner         string `json:"owner"`
	Group         string `json:"group"`
	UID           uint32 `json:"uid"`
	GID           uint32 `json:"gid"`
	MtimeUnixMs   int64  `json:"mtime_unix_ms"`
	SymlinkTarget string `json:"symlink_target,omitempty"`
}

func toFileInfo(i files.Info) fileInfo {
	return fileInfo{
		Name: i.Name, Path: i.Path, Type: i.Type.String(), Size: i.Size, Mode: i.Perm(),
		Permissions: i.Permissions(), Owner: i.Owner, Group: i.Group, UID: i.UID, GID: i.GID,
		MtimeUnixMs: i.ModTime.UnixMilli(), SymlinkTarget: i.SymlinkTarget,
	}
}

// pathParams are what every file op takes.
type pathParams struct {
	wire.Envelope
	Path string `json:"path"`
	User string `json:"user"`
}

func (p pathParams) check() error {
	if p.Path == "" {
		return wire.Errorf(wire.CodeBadRequest, "missing path")
	}
	return nil
}

func (s *Server) opFileStat(c *call) (any, error) {
	var p pathParams
	if err := c.params(&p); err != nil {
		return nil, err
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	info, err := s.cfg.Files.Stat(p.User, p.Path)
	if err != nil {
		return nil, err
	}
	return toFileInfo(info), nil
}

func (s *Server) opFileList(c *call) (any, error) {
	var p struct {
		pathParams
		Depth int `json:"depth"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	if p.Depth < 0 {
		return nil, wire.Errorf(wire.CodeBadRequest, "depth must be 1 to %d", files.MaxDepth)
	}
	infos, err := s.cfg.Files.List(p.User, p.Path, p.Depth)
	if err != nil {
		return nil, err
	}
	out := make([]fileInfo, len(infos))
	for i, info := range infos {
		out[i] = toFileInfo(info)
	}
	return map[string]any{"entries": out}, nil
}

func (s *Server) opFileMkdir(c *call) (any, error) {
	var p struct {
		pathParams
		Parents *bool `json:"parents"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	parents := p.Parents == nil || *p.Parents
	err := s.cfg.Files.MakeDir(p.User, p.Path, parents)
	created := err == nil
	if parents && errors.Is(err, files.ErrExists) && !errors.Is(err, files.ErrNotDir) {
		err = nil // mkdir -p: an existing directory is what was asked for
	}
	if err != nil {
		return nil, err
	}
	return map[string]any{"created": created}, nil
}

func (s *Server) opFileMove(c *call) (any, error) {
	var p struct {
		wire.Envelope
		From string `json:"from"`
		To   string `json:"to"`
		User string `json:"user"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	if p.From == "" || p.To == "" {
		return nil, wire.Errorf(wire.CodeBadRequest, "file_move needs from and to")
	}
	return nil, s.cfg.Files.Move(p.User, p.From, p.To)
}

func (s *Server) opFileRemove(c *call) (any, error) {
	var p struct {
		pathParams
		Recursive bool `json:"recursive"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	return nil, s.cfg.Files.Remove(p.User, p.Path, p.Recursive)
}

func (s *Server) opFileChmod(c *call) (any, error) {
	var p struct {
		pathParams
		Mode json.RawMessage `json:"mode"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	mode, err := modeParam(p.Mode)
	if err != nil {
		return nil, err
	}
	if mode == nil {
		return nil, wire.Errorf(wire.CodeBadRequest, "missing mode")
	}
	return nil, s.cfg.Files.Chmod(p.User, p.Path, *mode)
}

// modeParam reads a mode given as a number (420) or an octal string
// ("644", "0o644"); nil when absent.
func modeParam(raw json.RawMessage) (*uint32, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var n uint32
	if err := json.Unmarshal(raw, &n); err == nil {
		return &n, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if v, err := parseMode(s); err == nil {
			return &v, nil
		}
	}
	return nil, wire.Errorf(wire.CodeBadRequest, "mode must be a number or an octal string such as \"644\", got %s", raw)
}

func parseMode(s string) (uint32, error) {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O")
	v, err := strconv.ParseUint(s, 8, 32)
	return uint32(v), err
}

func (s *Server) opFileChown(c *call) (any, error) {
	var p struct {
		pathParams
		Owner string `json:"owner"`
		Group string `json:"group"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	return nil, s.cfg.Files.Chown(p.User, p.Path, p.Owner, p.Group)
}

func (s *Server) opFileRead(c *call) (any, error) {
	var p struct {
		pathParams
		Offset  int64  `json:"offset"`
		Length  int64  `json:"length"`
		Buffer  int    `json:"buffer"`
		GraceMs *int64 `json:"grace_ms"`
		Attach  *bool  `json:"attach"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	grace, err := graceParam(p.GraceMs)
	if err != nil {
		return nil, err
	}
	o := files.ReadOptions{Offset: p.Offset, Length: p.Length, Buffer: p.Buffer, Grace: grace, Client: c.ss.client}
	return s.create(c, p.Attach, func() (*stream.Stream, map[string]any, error) {
		tr, err := s.cfg.Files.ReadStream(p.User, p.Path, o)
		if err != nil {
			return nil, nil, err
		}
		r := map[string]any{"stream": tr.Stream.ID, "path": tr.Path, "size": tr.Size}
		if tr.Size < 0 {
			r["size"] = nil
		}
		return tr.Stream, r, nil
	})
}

func (s *Server) opFileWrite(c *call) (any, error) {
	var p struct {
		pathParams
		Mode      json.RawMessage `json:"mode"`
		Parents   *bool           `json:"parents"`
		Append    bool            `json:"append"`
		Exclusive bool            `json:"exclusive"`
		GraceMs   *int64          `json:"grace_ms"`
		Attach    *bool           `json:"attach"`
	}
	if err := c.params(&p); err != nil {
		return nil, err
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	mode, err := modeParam(p.Mode)
	if err != nil {
		return nil, err
	}
	grace, err := graceParam(p.GraceMs)
	if err != nil {
		return nil, err
	}
	o := files.UploadOptions{Grace: grace, WriteOptions: files.WriteOptions{
		Parents: p.Parents == nil || *p.Parents, Append: p.Append, Exclusive: p.Exclusive,
	}}
	if mode != nil {
		o.Mode = *mode
	}
	return s.create(c, p.Attach, func() (*stream.Stream, map[string]any, error) {
		tr, err := s.cfg.Files.WriteStream(p.User, p.Path, o, c.ss)
		if err != nil {
			return nil, nil, err
		}
		return tr.Stream, map[string]any{"stream": tr.Stream.ID, "path": tr.Path, "window": files.UploadWindow}, nil
	})
}

// sessionInput hands an IN frame to a stream that wants to know which
// connection sent it (an upload).
func (ss *Session) sessionInput(st *stream.Stream, in SessionInput, payload []byte) {
	if err := in.WriteInputFrom(ss, payload); err != nil {
		ss.sendError(wire.AsError(err), st.ID)
	}
}

// takeOver gives an attaching connection the stream's input, if it has
// input tied to connections, and adds what was received to the result.
func (ss *Session) takeOver(st *stream.Stream, result map[string]any) {
	if t, ok := st.Control.(InputTakeOver); ok && st.Ended() == nil {
		result["received"], result["written"] = t.TakeOver(ss)
	}
}
