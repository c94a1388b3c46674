package client

import (
	"context"
	"encoding/json"
	"fmt"
)

// FSEvent is one change under a watched directory.
type FSEvent struct {
	Seq uint64 `json:"seq"`
	// Op is create, write, remove, rename, chmod, or overflow (events
	// were lost: list the tree again; Path is the watched directory).
	// A rename is a rename of the old path, then a create of the new one
	// if it is still inside the watched tree.
	Op   string `json:"op"`
	Path string `json:"path"` // absolute
	Dir  bool   `json:"dir"`  // as seen when the agent handled the event
}

// Watch is a directory watch on the agent: the stream of its changes.
//
// Concurrency: consume events with Next from one goroutine at a time, or
// with Events, not both; everything else from anywhere.
type Watch struct {
	h    *handle
	feed eventFeed[FSEvent]
}

type watchParams struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// Watch starts watching a directory (absolute path) and attaches to its
// events. With recursive the whole tree is watched, new subdirectories
// included; what a new directory already holds when it joins is reported
// as create events.
func (c *Client) Watch(ctx context.Context, path string, recursive bool) (*Watch, error) {
	h, _, err := c.create(ctx, "watch", watchParams{Path: path, Recursive: recursive}, KindWatch, outputs{})
	if err != nil {
		return nil, err
	}
	return &Watch{h: h}, nil
}

// AttachWatch attaches to an existing watch and replays its events after
// the From cursor ("events": the last seq already seen), then follows it.
func (c *Client) AttachWatch(ctx context.Context, o AttachOptions) (*Watch, error) {
	h, _, err := c.attach(ctx, o, KindWatch, outputs{})
	if err != nil {
		return nil, err
	}
	return &Watch{h: h}, nil
}

// Stream is the agent's id of the watch's stream.
func (w *Watch) Stream() uint64 { return w.h.id }

// Next returns the next event, waiting for one. It returns a *GapError
// once where events were dropped before this client read them (call Next
// again to go on), and io.EOF after the watch ended (see End).
func (w *Watch) Next(ctx context.Context) (FSEvent, error) {
	raw, err := w.h.events.next(ctx)
	if err != nil {
		return FSEvent{}, err
	}
	var ev FSEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		return FSEvent{}, protocolErrorf("stream %d: malformed fs event: %v", w.h.id, err)
	}
	return ev, nil
}

// Events returns the events on a channel that is closed after the last
// one, skipping gaps (Gaps lists them). A goroutine delivers them until
// the end or until the client closes: drain the channel, or Close.
func (w *Watch) Events() <-chan FSEvent { return w.feed.start(w.h.c, w.Next) }

// Close removes the watch on the agent (unwatch) and returns once its end
// arrived: Next then returns the events still buffered, then io.EOF.
// Closing a watch that already ended is not an error.
func (w *Watch) Close(ctx context.Context) error {
	select {
	case <-w.h.done:
		return nil
	default:
	}
	_, err := w.h.c.call(ctx, "unwatch", streamRef{Stream: w.h.id}, callOpts{retry: true, once: true}) // idempotent
	if err != nil {
		return fmt.Errorf("client: unwatch stream %d: %w", w.h.id, err)
	}
	select {
	case <-w.h.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// End returns how the watch ended (reason closed after Close or when the
// directory went away, error past the inotify limit), or nil while it
// runs or if the handle failed (Next returns why).
func (w *Watch) End() *End {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	if w.h.end == nil {
		return nil
	}
	e := *w.h.end
	return &e
}

// Err returns why the handle failed (ErrConnectionLost, ErrDetached...),
// or nil while it runs or once it ended normally.
func (w *Watch) Err() error {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	return w.h.err
}

// Done is closed when the handle finished: the end arrived, or it failed.
func (w *Watch) Done() <-chan struct{} { return w.h.done }

// Detach stops receiving events; the watch goes on on the agent and
// keeps its events for a later AttachWatch.
func (w *Watch) Detach(ctx context.Context) error { return w.h.detach(ctx) }

// Gaps returns the gaps the agent announced so far on this handle.
func (w *Watch) Gaps() []GapError { return w.h.recordedGaps() }

// Cursors returns what the application consumed ("events": the last
// seq): attach from it to continue where this handle stopped.
func (w *Watch) Cursors() map[string]uint64 { return w.h.cursors(true) }
