package envdapi

import (
	"context"
	"strconv"

	"connectrpc.com/connect"

	"github.com/rayito/rayito-agent/internal/envdapi/gen/filesystem"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/watch"
)

// Polled watches, for clients that cannot hold a stream open (E2B's
// synchronous Python SDK). A watcher is a watch stream; its id is the
// stream's, and the events already handed out are the ones its log has
// acknowledged, so the adapter keeps no state between polls.

// CreateWatcher starts a watch and returns its id.
func (f *filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	path, err := f.s.userPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	st, err := f.s.cfg.Watches.WatchWith(path, watchOptions(req.Msg.GetRecursive()))
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&filesystem.CreateWatcherResponse{WatcherId: strconv.FormatUint(st.ID, 10)}), nil
}

// GetWatcherEvents returns the events since the previous call, at once.
func (f *filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystem.GetWatcherEventsRequest]) (*connect.Response[filesystem.GetWatcherEventsResponse], error) {
	st, err := f.s.watcher(req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	dir := st.Control.(*watch.Info).Path
	att, err := st.Attach(map[string]uint64{watch.Channel: st.Log(watch.Channel).Stats().Acked}, 0)
	if err != nil {
		return nil, connectError(err)
	}
	defer att.Close()
	// A done context makes Next return what is there without waiting.
	now, cancel := context.WithCancel(ctx)
	cancel()
	resp := &filesystem.GetWatcherEventsResponse{}
	for {
		item, err := att.Next(now, nil, 0)
		if err != nil {
			break
		}
		switch item.Kind {
		case stream.ItemEvent:
			ev, err := envdEvent(dir, item.Data)
			if err != nil {
				return nil, err
			}
			resp.Events = append(resp.Events, ev)
			continue
		case stream.ItemGap:
			return nil, errLostEvents(dir)
		case stream.ItemEnd:
			if len(resp.Events) == 0 {
				return nil, errorf(connect.CodeNotFound, "watcher %s has ended: %s", req.Msg.GetWatcherId(), item.End.Message)
			}
		}
		break
	}
	if err := att.Ack(att.Sent()); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(resp), nil
}

// RemoveWatcher ends a watch.
func (f *filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[filesystem.RemoveWatcherRequest]) (*connect.Response[filesystem.RemoveWatcherResponse], error) {
	st, err := f.s.watcher(req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	if err := f.s.cfg.Watches.Unwatch(st.ID); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&filesystem.RemoveWatcherResponse{}), nil
}

// watcher finds the watch stream a watcher id names.
func (s *Server) watcher(id string) (*stream.Stream, error) {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return nil, errorf(connect.CodeInvalidArgument, "watcher id %q is not one this agent gave", id)
	}
	st := s.cfg.Streams.Get(n)
	if st == nil || st.Kind != stream.KindWatch {
		return nil, errorf(connect.CodeNotFound, "no watcher %s", id)
	}
	return st, nil
}
