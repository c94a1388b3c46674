package envdapi

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"

	"connectrpc.com/connect"

	"github.com/rayito/rayito-agent/internal/envdapi/gen/filesystem"
	"github.com/rayito/rayito-agent/internal/files"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/watch"
)

// eventTypes maps the native protocol's fs event ops to envd's types.
var eventTypes = map[string]filesystem.EventType{
	watch.OpCreate.String(): filesystem.EventType_EVENT_TYPE_CREATE,
	watch.OpWrite.String():  filesystem.EventType_EVENT_TYPE_WRITE,
	watch.OpRemove.String(): filesystem.EventType_EVENT_TYPE_REMOVE,
	watch.OpRename.String(): filesystem.EventType_EVENT_TYPE_RENAME,
	watch.OpChmod.String():  filesystem.EventType_EVENT_TYPE_CHMOD,
}

// fsEvent is the part of a native fs event the translation reads.
type fsEvent struct {
	Op   string `json:"op"`
	Path string `json:"path"`
}

// WatchDir streams a directory's changes, with names relative to it, until
// the client goes away; the watch ends with the call.
func (f *filesystemService) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], out *connect.ServerStream[filesystem.WatchDirResponse]) error {
	s := f.s
	path, err := s.userPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return err
	}
	user, err := requestUser(req.Header())
	if err != nil {
		return err
	}
	st, err := s.cfg.Watches.Watch(path, req.Msg.GetRecursive())
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
	events := translator{dir: path}
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
			evs, err := events.translate(item.Data)
			if err != nil {
				return err
			}
			for _, ev := range evs {
				if req.Msg.GetIncludeEntry() {
					ev.Entry = s.eventEntry(user, path, ev.GetName())
				}
				if err := out.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
					return err
				}
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

// translator turns native fs events into envd's, named relative to the
// watched directory. The file manager writes a file atomically: a
// temporary file next to it, renamed over it. envd writes in place, and
// its clients wait for a write of the file; so the temporary file's own
// events are left out, and the create its rename gives the target is
// followed by a write. An overflow (events lost in the kernel or the
// buffer) has no envd event and ends the watch with data_loss.
type translator struct {
	dir string
	// committed is the directory in which the previous event renamed a
	// temporary file: the next event is that rename's create.
	committed string
}

func (t *translator) translate(raw []byte) ([]*filesystem.FilesystemEvent, error) {
	var e fsEvent
	if err := json.Unmarshal(raw, &e); err != nil {
		return nil, errorf(connect.CodeInternal, "undecodable watch event: %v", err)
	}
	if e.Op == watch.OpOverflow.String() {
		return nil, errLostEvents(t.dir)
	}
	typ, ok := eventTypes[e.Op]
	if !ok {
		return nil, errorf(connect.CodeInternal, "watch event with unknown op %q", e.Op)
	}
	committed := t.committed
	t.committed = ""
	if files.IsTemp(e.Path) {
		if typ == filesystem.EventType_EVENT_TYPE_RENAME {
			t.committed = filepath.Dir(e.Path)
		}
		return nil, nil
	}
	name, err := filepath.Rel(t.dir, e.Path)
	if err != nil {
		name = e.Path
	}
	out := []*filesystem.FilesystemEvent{{Name: name, Type: typ}}
	if typ == filesystem.EventType_EVENT_TYPE_CREATE && committed == filepath.Dir(e.Path) {
		out = append(out, &filesystem.FilesystemEvent{Name: name, Type: filesystem.EventType_EVENT_TYPE_WRITE})
	}
	return out, nil
}

// eventEntry describes the entry an event names, in the watched dir, as
// it is when the event is sent and as the request's user sees it; nil
// when nothing is there any more (a remove, a rename away) or the user
// may not look.
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
