package envdapi

import (
	"context"
	"errors"
	"path/filepath"

	"connectrpc.com/connect"

	"github.com/rayito/rayito-agent/internal/envdapi/gen/filesystem"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/watch"
)

// eventTypes maps a watch's ops to envd's event types.
var eventTypes = map[watch.Op]filesystem.EventType{
	watch.OpCreate: filesystem.EventType_EVENT_TYPE_CREATE,
	watch.OpWrite:  filesystem.EventType_EVENT_TYPE_WRITE,
	watch.OpRemove: filesystem.EventType_EVENT_TYPE_REMOVE,
	watch.OpRename: filesystem.EventType_EVENT_TYPE_RENAME,
	watch.OpChmod:  filesystem.EventType_EVENT_TYPE_CHMOD,
}

// watchOptions are how envd's watches report: envd writes files in place
// and its clients wait for a write of the file, so the agent's atomic
// writes are reported as a create and a write of the target, without
// the temporary file's own events.
func watchOptions(recursive bool) watch.Options {
	return watch.Options{Recursive: recursive, HideTemp: true}
}

// WatchDir streams a directory's changes, with names relative to it, until
// the client goes away; the watch ends with the call.
func (f *filesystemService) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], out *connect.ServerStream[filesystem.WatchDirResponse]) error {
	s := f.s
	path, err := s.userPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return err
	}
	b, err := f.requestUser(req.Header())
	if err != nil {
		return err
	}
	st, err := s.cfg.Watches.WatchWith(path, watchOptions(req.Msg.GetRecursive()))
	if err != nil {
		return connectError(err)
	}
	defer s.cfg.Watches.Unwatch(st.ID)
	att, err := st.Attach(nil, stream.DefaultWindow)
	if err != nil {
		return connectError(err)
	}
	defer att.Close()
	c := callFrom(ctx)
	c.onCut(func() { att.CutAfter(stream.End{Reason: stream.ReasonResume}) })

	if err := out.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	keepalive := keepaliveInterval(req.Header())
	for {
		item, err := nextItem(ctx, att, nil, keepalive)
		switch {
		case errors.Is(err, errQuiet):
			if err := out.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Keepalive{Keepalive: &filesystem.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
			continue
		case err != nil && ctx.Err() != nil:
			return streamContextError(ctx)
		case err != nil:
			return connectError(err)
		}
		switch item.Kind {
		case stream.ItemEvent:
			ev, err := envdEvent(path, item.Data)
			if err != nil {
				return err
			}
			if req.Msg.GetIncludeEntry() {
				ev.Entry = s.eventEntry(b.as, path, ev.GetName())
			}
			if err := out.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
				return err
			}
			att.Ack(map[string]uint64{item.Channel: att.Sent()[item.Channel]})
		case stream.ItemGap:
			return errLostEvents(path)
		case stream.ItemEnd:
			if item.End.Reason == stream.ReasonResume {
				return resumeError(c.cutBy(), "watch the directory again")
			}
			return errorf(connect.CodeAborted, "watch of %s ended: %s", path, item.End.Message)
		}
	}
}

// envdEvent translates one watch event into envd's, named relative to
// the watched directory. An overflow (events lost in the kernel or the
// buffer) has no envd event and ends the watch with data_loss.
func envdEvent(dir string, raw []byte) (*filesystem.FilesystemEvent, error) {
	e, err := watch.DecodeEvent(raw)
	if err != nil {
		return nil, errorf(connect.CodeInternal, "%v", err)
	}
	if e.Op == watch.OpOverflow {
		return nil, errLostEvents(dir)
	}
	typ, ok := eventTypes[e.Op]
	if !ok {
		return nil, errorf(connect.CodeInternal, "watch event with op %s", e.Op)
	}
	name, err := filepath.Rel(dir, e.Path)
	if err != nil {
		name = e.Path
	}
	return &filesystem.FilesystemEvent{Name: name, Type: typ}, nil
}

// eventEntry describes the entry an event names, in the watched dir, as
// it is when the event is sent (seen with the agent's rights, as envd
// sees it); nil when nothing is there any more (a remove, a rename away).
func (s *Server) eventEntry(user, dir, name string) *filesystem.EntryInfo {
	if !filepath.IsAbs(name) {
		name = filepath.Join(dir, name)
	}
	info, err := s.cfg.Files.StatWith(user, name, withMetadata)
	if err != nil {
		return nil
	}
	return entryInfo(info)
}

func errLostEvents(dir string) error {
	return errorf(connect.CodeDataLoss, "the watch of %s lost events (too many unread, or the kernel's queue overflowed): list the directory and watch it again", dir)
}

// userPath resolves a path a request names: relative paths are against
// the home of the user the request runs as (Basic header, or default).
func (s *Server) userPath(h map[string][]string, path string) (string, error) {
	if path == "" {
		return "", errorf(connect.CodeInvalidArgument, "path is required")
	}
	if filepath.IsAbs(path) {
		return filepath.Clean(path), nil
	}
	name, err := basicUser(h)
	if err != nil {
		return "", connect.NewError(connect.CodeInvalidArgument, err)
	}
	_, home, err := s.cfg.Users.User(name)
	if err != nil {
		return "", connectError(err)
	}
	return filepath.Join(home, path), nil
}
