package envdapi

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rayito/rayito-agent/internal/envdapi/gen/filesystem"
	"github.com/rayito/rayito-agent/internal/envdapi/gen/filesystem/filesystemconnect"
	"github.com/rayito/rayito-agent/internal/files"
)

// filesystemService is filesystem.Filesystem: the file operations run on
// the file manager with the agent's rights on the request's user's behalf
// (behalf.go), the watches on the watch manager.
type filesystemService struct {
	filesystemconnect.UnimplementedFilesystemHandler
	s *Server
}

// withMetadata: envd's entries carry the files' metadata.
var withMetadata = files.InfoOptions{Metadata: true}

// requestUser is who a filesystem RPC is for: the user the Basic header
// names, "" (the default user) without one. The operation runs with the
// agent's rights on that user's behalf (behalf.go).
func (f *filesystemService) requestUser(h map[string][]string) (behalf, error) {
	user, err := basicUser(h)
	if err != nil {
		return behalf{}, connect.NewError(connect.CodeInvalidArgument, err)
	}
	b, err := f.s.onBehalf(user)
	if err != nil {
		return behalf{}, fileError(err)
	}
	return b, nil
}

// Stat describes one entry; a symlink is described itself.
func (f *filesystemService) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	b, err := f.requestUser(req.Header())
	if err != nil {
		return nil, err
	}
	info, err := f.s.cfg.Files.StatWith(b.as, b.path(req.Msg.GetPath()), withMetadata)
	if err != nil {
		return nil, fileError(err)
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: entryInfo(info)}), nil
}

// ListDir lists a directory (a symlink to one is followed) down to depth
// levels, 1 when the request says 0.
func (f *filesystemService) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	b, err := f.requestUser(req.Header())
	if err != nil {
		return nil, err
	}
	infos, err := f.s.cfg.Files.ListWith(b.as, b.path(req.Msg.GetPath()), int(req.Msg.GetDepth()), withMetadata)
	if err != nil {
		return nil, fileError(err)
	}
	entries := make([]*filesystem.EntryInfo, len(infos))
	for i, info := range infos {
		entries[i] = entryInfo(info)
	}
	return connect.NewResponse(&filesystem.ListDirResponse{Entries: entries}), nil
}

// MakeDir creates a directory and its missing parents. An existing
// directory is already_exists (the SDK's makeDir then returns false);
// anything else in the way is invalid_argument.
func (f *filesystemService) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	b, err := f.requestUser(req.Header())
	if err != nil {
		return nil, err
	}
	path := b.path(req.Msg.GetPath())
	if err := f.s.cfg.Files.MakeDirFor(b.as, path, true, b.owner); err != nil {
		return nil, fileError(err)
	}
	info, err := f.s.cfg.Files.StatWith(b.as, path, withMetadata)
	if err != nil {
		return nil, fileError(err)
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: entryInfo(info)}), nil
}

// Move renames source to destination, creating the destination's missing
// parents as envd does, and describes what is there now.
func (f *filesystemService) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	b, err := f.requestUser(req.Header())
	if err != nil {
		return nil, err
	}
	m := req.Msg
	dst := b.path(m.GetDestination())
	if err := f.s.cfg.Files.MoveWith(b.as, b.path(m.GetSource()), dst, files.MoveOptions{Parents: true, Owner: b.owner}); err != nil {
		return nil, fileError(err)
	}
	info, err := f.s.cfg.Files.StatWith(b.as, dst, withMetadata)
	if err != nil {
		return nil, fileError(err)
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: entryInfo(info)}), nil
}

// Remove removes a file or a whole tree. A path that does not exist is
// not an error: envd's callers remove what may already be gone.
func (f *filesystemService) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	b, err := f.requestUser(req.Header())
	if err != nil {
		return nil, err
	}
	err = f.s.cfg.Files.Remove(b.as, b.path(req.Msg.GetPath()), true)
	if err != nil && !errors.Is(err, files.ErrNotFound) {
		return nil, fileError(err)
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}

// entryInfo is envd's description of an entry. A symlink is reported as
// one, with the absolute path it leads to and the permission bits found
// there (a link's own are always 0777); a link that leads nowhere keeps
// its target as written.
func entryInfo(i files.Info) *filesystem.EntryInfo {
	e := &filesystem.EntryInfo{
		Name: i.Name, Path: i.Path, Size: i.Size, Mode: uint32(i.Mode.Perm()), Permissions: i.Permissions(),
		Owner: i.Owner, Group: i.Group, ModifiedTime: timestamppb.New(i.ModTime), Metadata: i.Metadata,
	}
	switch i.Type {
	case files.TypeFile:
		e.Type = filesystem.FileType_FILE_TYPE_FILE
	case files.TypeDir:
		e.Type = filesystem.FileType_FILE_TYPE_DIRECTORY
	case files.TypeSymlink:
		e.Type = filesystem.FileType_FILE_TYPE_SYMLINK
		target := i.SymlinkTarget
		if r := i.Resolved; r != nil {
			target = r.Path
			e.Mode = uint32(r.Mode.Perm())
		}
		e.SymlinkTarget = &target
	}
	return e
}

// fileCodes map the file manager's errors to Connect codes, first match
// first: a file in the way of a directory (ErrExists and ErrNotDir) is
// invalid_argument, as envd says, not already_exists.
var fileCodes = []struct {
	kind error
	code connect.Code
}{
	{files.ErrNotFound, connect.CodeNotFound},
	{files.ErrNotDir, connect.CodeInvalidArgument},
	{files.ErrExists, connect.CodeAlreadyExists},
	{files.ErrPermission, connect.CodePermissionDenied},
	{files.ErrNotEmpty, connect.CodeFailedPrecondition},
	{files.ErrIsDir, connect.CodeInvalidArgument},
	{files.ErrNotRegular, connect.CodeInvalidArgument},
	{files.ErrInvalid, connect.CodeInvalidArgument},
	{files.ErrUnknownUser, connect.CodeInvalidArgument},
	{files.ErrUnsupported, connect.CodeInvalidArgument},
	{files.ErrNoSpace, connect.CodeResourceExhausted},
	{files.ErrTooMany, connect.CodeResourceExhausted},
	{files.ErrBusy, connect.CodeResourceExhausted},
	{files.ErrClosed, connect.CodeUnavailable},
}

// fileError is the Connect error of a file manager's error.
func fileError(err error) error {
	for _, c := range fileCodes {
		if errors.Is(err, c.kind) {
			return connect.NewError(c.code, err)
		}
	}
	return connect.NewError(connect.CodeInternal, err)
}
