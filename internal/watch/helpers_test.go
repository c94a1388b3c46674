package watch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// waitFor bounds every wait for an event; generous for a noisy machine.
const waitFor = 15 * time.Second

// fsEvent is an `fs` event as a client decodes it.
type fsEvent struct {
	Event  string `json:"event"`
	Stream uint64 `json:"stream"`
	Seq    uint64 `json:"seq"`
	Op     string `json:"op"`
	Path   string `json:"path"`
	Dir    bool   `json:"dir"`
}

// String is the form expectations are written in: "create /t/a dir".
func (e fsEvent) String() string {
	kind := "file"
	if e.Dir {
		kind = "dir"
	}
	return e.Op + " " + e.Path + " " + kind
}

func newManager(t testing.TB) (*Manager, *stream.Registry) {
	t.Helper()
	reg := stream.NewRegistry(0)
	m := NewManager(reg, zaptest.NewLogger(t))
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		reg.Close()
	})
	return m, reg
}

func mustWatch(t testing.TB, m *Manager, path string, recursive bool) *stream.Stream {
	t.Helper()
	s, err := m.Watch(path, recursive)
	if err != nil {
		t.Fatalf("Watch(%s, %v): %v", path, recursive, err)
	}
	return s
}

// client reads a watch stream the way the endpoint does: Next, then Ack.
type client struct {
	t    testing.TB
	a    *stream.Attachment
	last uint64 // seq of the last event consumed
	gaps [][2]uint64
	end  *stream.Item
}

func attach(t testing.TB, s *stream.Stream, from uint64) *client {
	t.Helper()
	a, err := s.Attach(map[string]uint64{Channel: from}, stream.DefaultWindow)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return &client{t: t, a: a, last: from}
}

// next returns the next event, recording gaps on the way; ok is false once
// the stream has ended. It fails the test after waitFor.
func (c *client) next() (ev fsEvent, ok bool) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for {
		if c.end != nil {
			return fsEvent{}, false
		}
		item, err := c.a.Next(ctx, nil, 1<<20)
		if err != nil {
			c.t.Fatalf("waiting for an event after seq %d: %v", c.last, err)
		}
		switch item.Kind {
		case stream.ItemGap:
			if item.From != c.last+1 {
				c.t.Fatalf("gap [%d,%d) after seq %d", item.From, item.To, c.last)
			}
			c.gaps = append(c.gaps, [2]uint64{item.From, item.To})
			c.last = item.To - 1
			// Acknowledge through the gap: the stream counts the skipped
			// events against the window until a client does.
			if err := c.a.Ack(map[string]uint64{Channel: c.last}); err != nil {
				c.t.Fatal(err)
			}
		case stream.ItemEnd:
			c.end = &item
			return fsEvent{}, false
		case stream.ItemEvent:
			e, err := DecodeEvent(item.Data)
			if err != nil {
				c.t.Fatalf("event %q: %v", item.Data, err)
			}
			ev = fsEvent{Event: "fs", Stream: c.a.Stream().ID, Seq: item.Offset, Op: e.Op.String(), Path: e.Path, Dir: e.Dir}
			if ev.Seq != c.last+1 {
				c.t.Fatalf("event %s after seq %d on stream %d", item.Data, c.last, c.a.Stream().ID)
			}
			c.last = ev.Seq
			if err := c.a.Ack(map[string]uint64{Channel: c.last}); err != nil {
				c.t.Fatal(err)
			}
			return ev, true
		}
	}
}

// until reads events up to and including the first that matches.
func (c *client) until(match func(fsEvent) bool) []fsEvent {
	c.t.Helper()
	var got []fsEvent
	for {
		ev, ok := c.next()
		if !ok {
			c.t.Fatalf("stream ended (%+v) before the awaited event; got %v", c.end.End, got)
		}
		got = append(got, ev)
		if match(ev) {
			return got
		}
	}
}

// sync creates a marker file in dir and returns the events before its
// create event: everything the changes made before sync produced.
func (c *client) sync(dir, shown string) []string {
	c.t.Helper()
	marker := fmt.Sprintf("marker-%d", time.Now().UnixNano())
	touch(c.t, filepath.Join(dir, marker))
	want := filepath.Join(shown, marker)
	got := c.until(func(e fsEvent) bool { return e.Op == "create" && e.Path == want })
	return describe(got[:len(got)-1])
}

// syncRetry is sync for when the kernel may drop events: it creates a new
// marker every second until one is reported.
func (c *client) syncRetry(dir string) []fsEvent {
	c.t.Helper()
	ready := make(chan struct{})
	markers := make(chan string, 64)
	go func() {
		defer close(markers)
		for i := 0; ; i++ {
			p := filepath.Join(dir, fmt.Sprintf("marker-%d", i))
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				return
			}
			markers <- p
			select {
			case <-ready:
				return
			case <-time.After(time.Second):
			}
		}
	}()
	defer close(ready)
	deadline := time.Now().Add(3 * waitFor)
	var got []fsEvent
	for time.Now().Before(deadline) {
		ev, ok := c.next()
		if !ok {
			c.t.Fatalf("stream ended: %+v", c.end.End)
		}
		got = append(got, ev)
		if ev.Op == "create" && strings.HasPrefix(filepath.Base(ev.Path), "marker-") {
			return got[:len(got)-1]
		}
	}
	c.t.Fatal("no marker event")
	return nil
}

func describe(evs []fsEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.String()
	}
	return out
}

func touch(t testing.TB, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// appendTo writes to an existing file without truncating it, so that it
// makes exactly one IN_MODIFY.
func appendTo(t testing.TB, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wireCode returns the protocol code of err, or "" if it carries none.
func wireCode(err error) wire.Code {
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Code
	}
	return ""
}
