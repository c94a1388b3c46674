package watch

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// node is one watched directory: one inotify watch, shared by every watch
// whose events in that directory it carries, and released with the last.
type node struct {
	path    string
	id      string // dirID of the directory when it was opened
	watches map[*watch]struct{}
	// subdirs names the child directories, watched or not: it says whether
	// a removed or renamed child was a directory, and where the tree goes.
	subdirs map[string]struct{}
	// pending names entries a scan reported as created whose own Create
	// event may still be queued; that event would be a duplicate.
	pending map[string]struct{}
}

// recursive returns the node's watches that extend to its subdirectories.
func (n *node) recursive() []*watch {
	var ws []*watch
	for w := range n.watches {
		if w.recursive {
			ws = append(ws, w)
		}
	}
	return ws
}

func (n *node) isSubdir(name string) bool {
	_, ok := n.subdirs[name]
	return ok
}

// emit sends one event to every watch routed through the node.
func (n *node) emit(op Op, path string, dir bool) {
	for w := range n.watches {
		w.emit(op, path, dir)
	}
}

// open returns the node of dir, creating it if needed. The inotify watch is
// added before the directory is read, so a child created in between is
// either read here or reported by an event. entries is what was read, nil
// when the node already existed.
//
// A node whose directory was removed (or moved away) and replaced at the
// same path before its event was handled is stale: its watches end as they
// would on that event, and a new node takes the path.
func (m *Manager) open(dir string) (*node, []os.DirEntry, error) {
	id, idErr := dirID(dir)
	if n := m.nodes[dir]; n != nil {
		if idErr == nil && id == n.id {
			return n, nil, nil
		}
		m.gone(dir, msgRemoved)
	}
	if err := m.fsw.Add(dir); err != nil {
		return nil, nil, err
	}
	entries, err := os.ReadDir(dir)
	if err == nil && idErr != nil {
		err = idErr
	}
	if err != nil {
		m.removeWatch(dir)
		return nil, nil, err
	}
	n := &node{path: dir, id: id, watches: make(map[*watch]struct{}), subdirs: subdirsOf(entries)}
	m.nodes[dir] = n
	if parent := m.nodes[filepath.Dir(dir)]; parent != nil && dir != "/" {
		parent.subdirs[filepath.Base(dir)] = struct{}{}
	}
	return n, entries, nil
}

func (m *Manager) join(n *node, w *watch) {
	n.watches[w] = struct{}{}
	w.nodes[n] = struct{}{}
}

// release takes w off n and drops n with its last watch.
func (m *Manager) release(n *node, w *watch) {
	delete(n.watches, w)
	delete(w.nodes, n)
	if len(n.watches) == 0 && m.nodes[n.path] == n {
		delete(m.nodes, n.path)
		m.removeWatch(n.path)
	}
}

// removeWatch removes the inotify watch of dir. The kernel has already
// dropped it if the directory was deleted, and fsnotify if it was moved.
func (m *Manager) removeWatch(dir string) {
	err := m.fsw.Remove(dir)
	if err != nil && !errors.Is(err, fsnotify.ErrNonExistentWatch) && !errors.Is(err, unix.EINVAL) {
		m.log.Debug("removing inotify watch", zap.String("path", dir), zap.Error(err))
	}
}

// finish ends w's stream (if it has one yet) and releases its nodes.
func (m *Manager) finish(w *watch, end stream.End) {
	if w.s != nil {
		w.s.Finish(end)
		delete(m.watches, w.s.ID)
		m.log.Debug("watch ended", zap.Uint64("stream", w.s.ID), zap.String("reason", string(end.Reason)),
			zap.String("message", end.Message))
	}
	for n := range w.nodes {
		m.release(n, w)
	}
}

// gone handles the disappearance of the watched directory dir and its
// tree: watches rooted there end with reason closed, the others let go.
func (m *Manager) gone(dir, why string) {
	var sub []*node
	for stack := []string{dir}; len(stack) > 0; {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n := m.nodes[p]
		if n == nil {
			continue
		}
		sub = append(sub, n)
		for name := range n.subdirs {
			stack = append(stack, join(p, name))
		}
	}
	for _, n := range sub {
		for w := range n.watches {
			if w.root == n.path {
				m.finish(w, stream.End{Reason: stream.ReasonClosed, Message: why})
			} else {
				m.release(n, w)
			}
		}
	}
}

// grow extends the recursive watches of parent to its new subdirectory dir
// and everything already in it. Each directory is watched first and then
// scanned; what the scan finds is reported as created, because it was
// created before the watch could see it (mkdir -p a/b/c && touch a/b/c/f).
// announce, when not nil, reports dir's own create once dir is watched
// and before what is in it: a client that acts on that report (writes a
// file into the new directory) then has its act seen as it happens, not
// folded into the scan's create.
func (m *Manager) grow(parent *node, dir string, announce func()) {
	once := func() {
		if announce != nil {
			announce()
			announce = nil
		}
	}
	defer once()
	ws := parent.recursive()
	if len(ws) == 0 {
		return
	}
	if m.beforeGrow != nil {
		m.beforeGrow(dir)
	}
	for stack := []string{dir}; len(stack) > 0; {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n, entries, err := m.open(p)
		if err == nil && entries == nil {
			entries, err = os.ReadDir(p)
		}
		if err != nil {
			if isGone(err) {
				continue // already removed; its Remove event is queued
			}
			once()
			m.fail(ws, p, err)
			return
		}
		for _, w := range ws {
			m.join(n, w)
		}
		once()
		if len(entries) > 0 {
			m.log.Debug("new directory already has entries", zap.String("path", p), zap.Int("entries", len(entries)))
		}
		for _, e := range entries {
			name := e.Name()
			if n.pending == nil {
				n.pending = make(map[string]struct{})
			}
			n.pending[name] = struct{}{}
			n.emit(OpCreate, join(p, name), e.IsDir())
			if e.IsDir() {
				n.subdirs[name] = struct{}{}
				stack = append(stack, join(p, name))
			}
		}
	}
}

// fail ends the watches that could not follow their tree into dir, with
// reason error: going on without part of the tree would hide its events.
func (m *Manager) fail(ws []*watch, dir string, err error) {
	for _, w := range ws {
		if w.s == nil || m.watches[w.s.ID] != w {
			continue
		}
		msg := wire.AsError(m.clientError(w.shown(dir), err)).Message
		m.log.Warn("watch failed", zap.Uint64("stream", w.s.ID), zap.String("message", msg))
		m.finish(w, stream.End{Reason: stream.ReasonError, Message: msg})
	}
}
