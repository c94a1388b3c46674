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
// the file manager as the request's user, the watches on the watch
// manager.
type filesystemService struct {
	filesystemconnect.UnimplementedFilesystemHandler
	s *Server
}

// withMetadata: envd's entries carry the files' metadata.
var withMetadata = files.InfoOptions{Metadata: true}

// requestUser is who a filesystem RPC runs as: the user the Basic header
// names, "" (the default user) without one.
func requestUser(h map[string][]string) (string, error) {
	user, err := basicUser(h)
	if err != nil {
		return "", connect.NewError(connect.CodeInvalidArgument, err)
	}
	return user, nil
}

// Stat describes one entry; a symlink is described itself.
func (f *filesystemService) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	user, err := requestUser(req.Header())
	if err != nil {
		return nil, err
	}
	info, err := f.s.cfg.Files.StatWith(user, req.Msg.GetPath(), withMetadata)
	if err != nil {
		return nil, fileError(err)
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: entryInfo(info)}), nil
}

// ListDir lists a directory (a symlink to one is followed) down to depth
// levels, 1 when the request says 0.
func (f *filesystemService) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	user, err := requestUser(req.Header())
	if err != nil {
		return nil, err
	}
	infos, err := f.s.cfg.Files.ListWith(user, req.Msg.GetPath(), int(req.Msg.GetDepth()), withMetadata)
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
	user, err := requestUser(req.Header())
	if err != nil {
		return nil, err
	}
	if err := f.s.cfg.Files.MakeDir(user, req.Msg.GetPath(), true); err != nil {
		return nil, fileError(err)
	}
	info, err := f.s.cfg.Files.StatWith(user, req.Msg.GetPath(), withMetadata)
	if err != nil {
		return nil, fileError(err)
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: entryInfo(info)}), nil
}

// Move renames source to destination, creating the destination's missing
// parents as envd does, and describes what is there now.
func (f *filesystemService) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	user, err := requestUser(req.Header())
	if err != nil {
		return nil, err
	}
	m := req.Msg
	if err := f.s.cfg.Files.MoveWith(user, m.GetSource(), m.GetDestination(), files.MoveOptions{Parents: true}); err != nil {
		return nil, fileError(err)
	}
	info, err := f.s.cfg.Files.StatWith(user, m.GetDestination(), withMetadata)
	if err != nil {
		return nil, fileError(err)
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: entryInfo(info)}), nil
}

// Remove removes a file or a whole tree. A path that does not exist is
// not an error: envd's callers remove what may already be gone.
func (f *filesystemService) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	user, err := requestUser(req.Header())
	if err != nil {
		return nil, err
	}
	err = f.s.cfg.Files.Remove(user, req.Msg.GetPath(), true)
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
