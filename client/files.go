package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"time"
)

// Files are the file operations of a client, run by the agent as a user:
// the default user (from /v1/init or the agent's flags) unless As names
// another. Relative paths are relative to that user's home. Errors are
// *Error with the protocol's codes: CodeNotFound, CodePermissionDenied,
// CodeConflict (exists, not empty), CodeBadRequest, CodeLimit (disk full).
type Files struct {
	c    *Client
	user string
}

// Files returns the client's file operations as the default user.
func (c *Client) Files() *Files { return &Files{c: c} }

// As returns the same operations run as another user.
func (f *Files) As(user string) *Files { return &Files{c: f.c, user: user} }

// FileType is what kind of entry a path is.
type FileType string

const (
	FileTypeFile    FileType = "file"
	FileTypeDir     FileType = "dir"
	FileTypeSymlink FileType = "symlink"
	FileTypeOther   FileType = "other" // a device, FIFO or socket
)

// FileInfo describes one entry; a symlink is described itself.
type FileInfo struct {
	Name string   `json:"name"`
	Path string   `json:"path"` // absolute
	Type FileType `json:"type"`
	Size int64    `json:"size"`
	// Mode is the permission bits with setuid 0o4000, setgid 0o2000 and
	// sticky 0o1000, as chmod takes them.
	Mode uint32 `json:"mode"`
	// Permissions is the mode as ls -l shows it ("-rw-r--r--").
	Permissions   string    `json:"permissions"`
	Owner         string    `json:"owner"`
	Group         string    `json:"group"`
	UID           uint32    `json:"uid"`
	GID           uint32    `json:"gid"`
	ModTime       time.Time `json:"-"`
	SymlinkTarget string    `json:"symlink_target"`
}

// IsDir reports whether the entry is a directory.
func (i FileInfo) IsDir() bool { return i.Type == FileTypeDir }

func (i *FileInfo) UnmarshalJSON(b []byte) error {
	var w fileWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*i = w.info()
	return nil
}

// fileWire is a FileInfo as the protocol sends it. Stat and List decode
// results into it, not into FileInfo: encoding/json checks the bytes of a
// value before it hands them to an UnmarshalJSON, which then decodes them
// again, and that second pass was half of a stat's decoding (5 us against
// 2.5 here) and of a listing's.
type fileWire struct {
	Name          string   `json:"name"`
	Path          string   `json:"path"`
	Type          FileType `json:"type"`
	Size          int64    `json:"size"`
	Mode          uint32   `json:"mode"`
	Permissions   string   `json:"permissions"`
	Owner         string   `json:"owner"`
	Group         string   `json:"group"`
	UID           uint32   `json:"uid"`
	GID           uint32   `json:"gid"`
	MtimeUnixMs   int64    `json:"mtime_unix_ms"`
	SymlinkTarget string   `json:"symlink_target"`
}

func (w *fileWire) info() FileInfo {
	return FileInfo{
		Name: w.Name, Path: w.Path, Type: w.Type, Size: w.Size, Mode: w.Mode,
		Permissions: w.Permissions, Owner: w.Owner, Group: w.Group, UID: w.UID, GID: w.GID,
		ModTime: time.UnixMilli(w.MtimeUnixMs), SymlinkTarget: w.SymlinkTarget,
	}
}

// fileParams are what every file op takes.
type fileParams struct {
	Path string `json:"path"`
	User string `json:"user,omitempty"`
}

func (f *Files) params(path string) fileParams { return fileParams{Path: path, User: f.user} }

// resend says how a file op is sent again when a connection drops before
// its answer.
type resend int

const (
	readOnly   resend = iota // changes nothing: sent again as it is
	idempotent               // a repeat changes nothing more: sent again, with its op_id where the agent takes them
	changes                  // sent again only with its op_id, so that it runs once
)

// call runs a file op, sent again as how says when a connection drops.
func (f *Files) call(ctx context.Context, op string, params any, how resend, out any) error {
	res, err := f.c.call(ctx, op, params, callOpts{retry: how != changes, once: how != readOnly})
	if err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(res, out); err != nil {
		return protocolErrorf("%s result %s", op, res)
	}
	return nil
}

// Stat describes the entry at path.
func (f *Files) Stat(ctx context.Context, path string) (FileInfo, error) {
	var w fileWire
	if err := f.call(ctx, "file_stat", f.params(path), readOnly, &w); err != nil {
		return FileInfo{}, err
	}
	return w.info(), nil
}

// List returns the entries of the directory at path down to depth levels
// (1, or 0: its own entries; at most 16), depth first with names sorted.
// Symlinks are listed, not followed.
func (f *Files) List(ctx context.Context, path string, depth int) ([]FileInfo, error) {
	var out struct {
		Entries []fileWire `json:"entries"`
	}
	p := struct {
		fileParams
		Depth int `json:"depth,omitempty"`
	}{f.params(path), depth}
	if err := f.call(ctx, "file_list", p, readOnly, &out); err != nil {
		return nil, err
	}
	infos := make([]FileInfo, len(out.Entries))
	for i := range out.Entries {
		infos[i] = out.Entries[i].info()
	}
	return infos, nil
}

// MkdirAll creates a directory and the parents it needs; an existing
// directory is fine, a file in the way is CodeConflict.
func (f *Files) MkdirAll(ctx context.Context, path string) error {
	return f.call(ctx, "file_mkdir", f.params(path), idempotent, nil)
}

// Move renames from to to, replacing a file there (across filesystems the
// agent copies, then removes from).
func (f *Files) Move(ctx context.Context, from, to string) error {
	p := struct {
		From string `json:"from"`
		To   string `json:"to"`
		User string `json:"user,omitempty"`
	}{from, to, f.user}
	return f.call(ctx, "file_move", p, changes, nil)
}

// Remove removes a file, symlink or empty directory.
func (f *Files) Remove(ctx context.Context, path string) error {
	return f.call(ctx, "file_remove", f.params(path), changes, nil)
}

// RemoveAll removes path and everything below it; a missing path is fine.
func (f *Files) RemoveAll(ctx context.Context, path string) error {
	p := struct {
		fileParams
		Recursive bool `json:"recursive"`
	}{f.params(path), true}
	err := f.call(ctx, "file_remove", p, idempotent, nil)
	if HasCode(err, CodeNotFound) {
		return nil
	}
	return err
}

// Chmod sets path's mode: the permission bits and setuid, setgid, sticky.
func (f *Files) Chmod(ctx context.Context, path string, mode fs.FileMode) error {
	p := struct {
		fileParams
		Mode uint32 `json:"mode"`
	}{f.params(path), modeBits(mode)}
	return f.call(ctx, "file_chmod", p, idempotent, nil)
}

// Chown sets path's owner and group, by name or number; "" leaves one as
// it is.
func (f *Files) Chown(ctx context.Context, path, owner, group string) error {
	p := struct {
		fileParams
		Owner string `json:"owner,omitempty"`
		Group string `json:"group,omitempty"`
	}{f.params(path), owner, group}
	return f.call(ctx, "file_chown", p, idempotent, nil)
}

// modeBits converts a FileMode to the protocol's mode number.
func modeBits(m fs.FileMode) uint32 {
	b := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		b |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		b |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		b |= 0o1000
	}
	return b
}

// ReadFile downloads the whole file at path.
func (f *Files) ReadFile(ctx context.Context, path string) ([]byte, error) {
	r, err := f.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	stop := context.AfterFunc(ctx, func() { r.Close() })
	defer stop()
	var buf bytes.Buffer
	if r.Size() > 0 {
		buf.Grow(int(r.Size()))
	}
	if _, err := r.WriteTo(&buf); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteFile writes data to the file at path atomically, creating it (and
// its parents) with mode if it does not exist (mode 0: 0o666 less the
// agent's umask; a replaced file keeps its mode).
func (f *Files) WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	w, err := f.Create(ctx, path, WriteOptions{Mode: mode})
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { w.Abort(context.Background()) })
	defer stop()
	_, err = w.Write(data)
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		w.Abort(context.Background())
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	return nil
}

// DownloadTar downloads the directory at path as a tar archive over
// HTTP (GET /v1/files?format=tar): entries are relative to the directory.
// A transfer that fails midway (an unreadable file) ends with a read
// error, never with a short archive that looks complete.
func (f *Files) DownloadTar(ctx context.Context, path string) (io.ReadCloser, error) {
	q := url.Values{"path": {path}, "format": {"tar"}}
	if f.user != "" {
		q.Set("user", f.user)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.c.httpBase+"/v1/files?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	if token := f.c.accessToken(); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc := f.c.opts.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: GET /v1/files: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, decodeAnswer("GET /v1/files", resp.StatusCode, body, nil)
	}
	return resp.Body, nil
}
