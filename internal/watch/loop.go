package watch

import (
	"errors"
	"path/filepath"
	"slices"
	"sort"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// run routes fsnotify's events until Close closes the watcher.
func (m *Manager) run() {
	defer m.wg.Done()
	for {
		select {
		case ev, ok := <-m.fsw.Events:
			if !ok {
				return
			}
			m.handle(ev)
		case <-m.kick:
			if m.lost.Swap(false) {
				m.overflowed()
			}
		}
	}
}

// drainErrors reads fsnotify's errors on its own goroutine, never taking
// the manager's lock: fsnotify sends some errors while holding its own
// lock, which Watch and Unwatch need under ours.
func (m *Manager) drainErrors() {
	defer m.wg.Done()
	for err := range m.fsw.Errors {
		if errors.Is(err, fsnotify.ErrEventOverflow) {
			m.lost.Store(true)
			select {
			case m.kick <- struct{}{}:
			default:
			}
			continue
		}
		m.log.Warn("reading inotify", zap.Error(err))
	}
}

// handle routes one event to the watches of the directory it happened in.
//
// fsnotify reports a change to a watched directory twice when its parent is
// watched too, once from each inotify watch, under the same name: a chmod
// (the directory's own copy follows the parent's) and a rename (the
// directory's own IN_MOVE_SELF comes after the parent's IN_MOVED_FROM).
// Those own copies are dropped here; changes to a watch's root directory
// itself are not reported, except that its removal ends the watch.
func (m *Manager) handle(ev fsnotify.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	prev := m.prev
	m.prev = ev
	path := filepath.Clean(ev.Name)
	var parent *node
	if path != "/" {
		parent = m.nodes[filepath.Dir(path)]
	}
	self := m.nodes[path]
	name := filepath.Base(path)
	switch {
	case ev.Has(fsnotify.Create):
		m.created(parent, path, name)
	case ev.Has(fsnotify.Remove):
		m.vanished(parent, self, path, name, OpRemove)
	case ev.Has(fsnotify.Rename):
		m.vanished(parent, self, path, name, OpRename)
	case ev.Has(fsnotify.Write):
		if parent != nil {
			parent.emit(OpWrite, path, parent.isSubdir(name))
		}
	case ev.Has(fsnotify.Chmod):
		if self != nil && (parent == nil || prev == ev) {
			return // the directory's own copy
		}
		if parent != nil {
			parent.emit(OpChmod, path, parent.isSubdir(name))
		}
	}
}

// created reports a new entry and, for a directory in a recursive tree,
// extends the tree to it.
func (m *Manager) created(parent *node, path, name string) {
	if parent == nil {
		return
	}
	m.movedAway.take(path)
	if _, ok := parent.pending[name]; ok {
		delete(parent.pending, name) // a scan reported it already
		return
	}
	if !isDir(path) {
		parent.emit(OpCreate, path, false)
		return
	}
	parent.subdirs[name] = struct{}{}
	m.grow(parent, path, func() { parent.emit(OpCreate, path, true) })
}

// vanished reports an entry removed or renamed away; if it was a watched
// directory, its tree goes too and watches rooted there end.
func (m *Manager) vanished(parent, self *node, path, name string, op Op) {
	if op == OpRename && self == nil && m.movedAway.take(path) {
		return // the directory's own copy of a rename already reported
	}
	if parent != nil {
		dir := parent.isSubdir(name) || self != nil
		delete(parent.subdirs, name)
		delete(parent.pending, name)
		parent.emit(op, path, dir)
		if op == OpRename && self != nil {
			m.movedAway.add(path)
		}
	}
	if self != nil && m.stale(self, op) {
		return // the event is about the directory that was here before
	}
	if self != nil {
		why := msgRemoved
		if op == OpRename {
			why = msgMoved
		}
		m.gone(path, why)
	}
}

// overflowed handles the loss of events in the kernel's queue: every watch
// gets an overflow event, then the trees are re-read so that directories
// created meanwhile are watched (and what they hold reported).
func (m *Manager) overflowed() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	m.log.Warn("inotify queue overflowed; events were lost (sysctl fs.inotify.max_queued_events)",
		zap.Int("watches", len(m.watches)))
	m.prev = fsnotify.Event{}
	m.movedAway = recent{}
	for _, w := range m.watches {
		w.overflow()
	}
	paths := make([]string, 0, len(m.nodes))
	for p := range m.nodes {
		paths = append(paths, p)
	}
	sort.Strings(paths) // parents first
	for _, p := range paths {
		if n := m.nodes[p]; n != nil {
			m.resync(n)
		}
	}
}

// resync re-reads one node's directory after events were lost.
func (m *Manager) resync(n *node) {
	fresh, err := readSubdirs(n.path)
	if err != nil {
		if isGone(err) {
			m.gone(n.path, msgRemoved)
		} else {
			m.log.Warn("re-reading watched directory", zap.String("path", n.path), zap.Error(err))
		}
		return
	}
	old := n.subdirs
	n.subdirs, n.pending = fresh, nil
	for name := range old {
		if _, ok := fresh[name]; !ok && m.nodes[join(n.path, name)] != nil {
			m.gone(join(n.path, name), msgRemoved)
		}
	}
	rec := n.recursive()
	for name := range fresh {
		child := join(n.path, name)
		var announce func()
		if _, ok := old[name]; !ok {
			announce = func() { n.emit(OpCreate, child, true) }
		}
		if c := m.nodes[child]; len(rec) > 0 && (c == nil || !c.hasAll(rec)) {
			m.grow(n, child, announce)
		} else if announce != nil {
			announce()
		}
	}
}

func (n *node) hasAll(ws []*watch) bool {
	for _, w := range ws {
		if _, ok := n.watches[w]; !ok {
			return false
		}
	}
	return true
}

// recent remembers the last few directories renamed away, to recognize
// their own copy of the rename; fsnotify may deliver it a little later.
type recent struct {
	paths [8]string
	next  int
}

func (r *recent) add(path string) {
	r.paths[r.next] = path
	r.next = (r.next + 1) % len(r.paths)
}

// take forgets path and reports whether it was remembered.
func (r *recent) take(path string) bool {
	for i, p := range r.paths {
		if p == path {
			r.paths[i] = ""
			return true
		}
	}
	return false
}

// stale reports whether a removal or rename event for the node's path was
// about a directory that was there before the node's: the node's own is
// still there. A removed directory never comes back; a renamed one may be
// renamed back, but then fsnotify drops its inotify watch (on IN_MOVE_SELF)
// and the node is dead, so that case is not stale.
func (m *Manager) stale(n *node, op Op) bool {
	if id, err := dirID(n.path); err != nil || id != n.id {
		return false
	}
	return op == OpRemove || slices.Contains(m.fsw.WatchList(), n.path)
}
