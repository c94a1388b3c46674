package watch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// Channel is the name of a watch stream's only channel.
const Channel = "events"

// Capacity is how many events a watch stream retains (protocol section 3);
// older ones are dropped and announced as a gap.
const Capacity = stream.DefaultEventCapacity

// End messages of watch streams; the reason is always closed.
const (
	msgUnwatched = "unwatched"
	msgRemoved   = "watched directory was removed"
	msgMoved     = "watched directory was moved away"
	msgShutdown  = "the agent is shutting down"
)

// Info describes a watch. It is the Control value of the watch's stream.
type Info struct {
	Path      string // the directory as the client named it, cleaned
	Recursive bool
}

// Manager owns the agent's inotify instance and every watch on it.
// Its methods are safe for concurrent use.
type Manager struct {
	reg    *stream.Registry
	log    *zap.Logger
	isTemp func(path string) bool
	fsw    *fsnotify.Watcher
	kick   chan struct{} // wakes the event loop after a kernel queue overflow
	lost   atomic.Bool   // a kernel queue overflow is waiting to be handled
	wg     sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	nodes     map[string]*node  // by resolved directory path
	watches   map[uint64]*watch // by stream id, running watches only
	prev      fsnotify.Event    // the last event read; see handle
	movedAway recent
	// beforeGrow, set by tests, runs before a new directory of a
	// recursive tree is watched: a slow moment there is when a client
	// could act on a create reported too early.
	beforeGrow func(dir string)
}

// watch is the producer side of one watch stream.
type watch struct {
	s         *stream.Stream
	log       *stream.Log
	root      string // resolved: symlinks gone, as inotify reports paths
	display   string // as the client named it; events use this prefix
	recursive bool
	nodes     map[*node]struct{}

	lostSeen    uint64 // the log's Lost count already answered by an overflow event
	overflowSeq uint64 // seq of the last overflow event

	// hideTemp, when set, names the agent's temporary files, which this
	// watch leaves out (Options.HideTemp); committed is the directory in
	// which the previous event renamed one.
	hideTemp  func(path string) bool
	committed string
}

// Options say how a watch reports.
type Options struct {
	Recursive bool // the whole tree, not the directory alone
	// HideTemp leaves out the temporary files of the agent's atomic
	// writes (file uploads, file_write) and reports each commit as a
	// create of the target followed by a write, as if the file had been
	// written in place. It needs the manager to know the temporary files
	// (ManagerOptions.IsTemp); without, it changes nothing.
	HideTemp bool
}

// ManagerOptions configure a Manager.
type ManagerOptions struct {
	Logger *zap.Logger
	// IsTemp names the temporary files of the agent's atomic writes
	// (files.IsTemp), for watches with HideTemp.
	IsTemp func(path string) bool
}

// NewManager creates the manager. The shared inotify instance, and the
// goroutines that read it, start at the first watch: fsnotify reads
// through a 64 KiB buffer on its reader's stack, memory an agent that is
// never asked for a watch (a sandbox snapshotted idle) need not hold.
// Close releases them.
func NewManager(reg *stream.Registry, log *zap.Logger) *Manager {
	return NewManagerWith(reg, ManagerOptions{Logger: log})
}

// NewManagerWith is NewManager with options.
func NewManagerWith(reg *stream.Registry, o ManagerOptions) *Manager {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return &Manager{
		reg: reg, log: o.Logger, isTemp: o.IsTemp, kick: make(chan struct{}, 1),
		nodes: make(map[string]*node), watches: make(map[uint64]*watch),
	}
}

// startLocked creates the inotify instance and starts reading it, once.
func (m *Manager) startLocked() error {
	if m.fsw != nil {
		return nil
	}
	fsw, err := fsnotify.NewWatcher()
	if errors.Is(err, unix.EMFILE) {
		// Either limit gives EMFILE: the user's inotify instances or the
		// process's descriptors.
		return wire.Errorf(wire.CodeLimit, "watch: cannot open an inotify instance: the limit of inotify instances (sysctl fs.inotify.max_user_instances) or of the agent's open files is reached")
	} else if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	m.fsw = fsw
	m.wg.Add(2)
	go m.run()
	go m.drainErrors()
	return nil
}

// Watch starts watching the directory at path (absolute), and its whole
// tree if recursive, into a new stream. Errors a client can fix are
// *wire.Error: bad_request, not_found, limit, or unavailable after Close.
func (m *Manager) Watch(path string, recursive bool) (*stream.Stream, error) {
	return m.WatchWith(path, Options{Recursive: recursive})
}

// WatchWith is Watch with options.
func (m *Manager) WatchWith(path string, o Options) (*stream.Stream, error) {
	recursive := o.Recursive
	display, root, err := resolve(path)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, wire.Errorf(wire.CodeUnavailable, "watch: %s", msgShutdown)
	}
	if err := m.startLocked(); err != nil {
		return nil, err
	}
	w := &watch{root: root, display: display, recursive: recursive, nodes: make(map[*node]struct{})}
	if o.HideTemp {
		w.hideTemp = m.isTemp
	}
	if err := m.attach(w); err != nil {
		m.finish(w, stream.End{})
		return nil, err
	}
	w.s = m.reg.Create(stream.Config{
		Kind:     stream.KindWatch,
		Channels: []stream.ChannelSpec{{Name: Channel, Unit: stream.Events, Policy: stream.Drop, Capacity: Capacity}},
		Control:  &Info{Path: display, Recursive: recursive},
	})
	w.log = w.s.Log(Channel)
	m.watches[w.s.ID] = w
	m.log.Debug("watch started", zap.Uint64("stream", w.s.ID), zap.String("path", display),
		zap.Bool("recursive", recursive), zap.Int("dirs", len(w.nodes)))
	return w.s, nil
}

// Unwatch ends a watch stream with reason closed and releases the inotify
// watches no other watch uses. A watch that already ended is not an error.
func (m *Manager) Unwatch(id uint64) error {
	s := m.reg.Get(id)
	if s == nil {
		return wire.Errorf(wire.CodeNotFound, "no stream %d", id)
	}
	if s.Kind != stream.KindWatch {
		return wire.Errorf(wire.CodeBadRequest, "stream %d is a %s stream, not a watch", id, s.Kind)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if w := m.watches[id]; w != nil {
		m.finish(w, stream.End{Reason: stream.ReasonClosed, Message: msgUnwatched})
	}
	return nil
}

// Close ends every watch (reason closed), stops the goroutines and closes
// the inotify instance. Later Watch calls fail with unavailable.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.wg.Wait()
		return nil
	}
	m.closed = true
	for _, w := range m.watches {
		m.finish(w, stream.End{Reason: stream.ReasonClosed, Message: msgShutdown})
	}
	m.mu.Unlock()
	var err error
	if m.fsw != nil {
		err = m.fsw.Close()
	}
	m.wg.Wait()
	return err
}

// attach gives w a node for its directory and, if recursive, for every
// directory below. On error the caller releases what was taken.
func (m *Manager) attach(w *watch) error {
	stack := []string{w.root}
	for len(stack) > 0 {
		dir := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n, _, err := m.open(dir)
		if err != nil {
			if dir != w.root && isGone(err) {
				continue // removed while we walked; its event is queued
			}
			return m.clientError(w.shown(dir), err)
		}
		m.join(n, w)
		if w.recursive {
			for name := range n.subdirs {
				stack = append(stack, join(dir, name))
			}
		}
	}
	return nil
}

// resolve checks a client's path and returns it cleaned (display) and with
// symlinks resolved (root), the form inotify reports.
func resolve(path string) (display, root string, err error) {
	if path == "" {
		return "", "", wire.Errorf(wire.CodeBadRequest, "watch: path is required")
	}
	if !filepath.IsAbs(path) {
		return "", "", wire.Errorf(wire.CodeBadRequest, "watch: path %q is not absolute", path)
	}
	if strings.IndexByte(path, 0) >= 0 {
		// No file name holds one; the kernel would answer EINVAL.
		return "", "", wire.Errorf(wire.CodeBadRequest, "watch: path %q holds a NUL byte", path)
	}
	display = filepath.Clean(path)
	// The kernel's stat first: it reports a symlink loop as ELOOP, where
	// EvalSymlinks only gives up with an untyped error.
	var fi os.FileInfo
	if fi, err = os.Stat(display); err == nil && !fi.IsDir() {
		err = unix.ENOTDIR
	}
	if err == nil {
		root, err = filepath.EvalSymlinks(display)
	}
	if err != nil {
		return "", "", clientError(display, err, 0)
	}
	return display, root, nil
}

func (m *Manager) clientError(shown string, err error) error {
	return clientError(shown, err, len(m.nodes))
}

// clientError turns a failure to watch a directory into the protocol error
// that tells the client what to fix; held is the agent's inotify watches.
func clientError(shown string, err error, held int) error {
	switch {
	case errors.Is(err, unix.ENOSPC):
		return wire.Errorf(wire.CodeLimit,
			"watch %s: inotify watch limit reached (this agent holds %d watches); raise sysctl fs.inotify.max_user_watches",
			shown, held)
	case errors.Is(err, unix.ENOENT):
		return wire.Errorf(wire.CodeNotFound, "watch %s: no such directory", shown)
	case errors.Is(err, unix.ENOTDIR):
		return wire.Errorf(wire.CodeBadRequest, "watch %s: not a directory", shown)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return wire.Errorf(wire.CodeBadRequest, "watch %s: permission denied", shown)
	case errors.Is(err, unix.ELOOP):
		return wire.Errorf(wire.CodeBadRequest, "watch %s: too many levels of symbolic links", shown)
	}
	return fmt.Errorf("watch %s: %w", shown, err)
}

// isGone reports whether err means the directory no longer exists there.
func isGone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR)
}

// join is filepath.Join for a clean directory and one name, without the
// cost of cleaning again.
func join(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}
