// Package watch turns directory changes into `fs` events on watch streams.
//
// One inotify instance (an fsnotify.Watcher) serves every watch. inotify
// watches single directories, so a recursive watch is one inotify watch per
// directory of its tree, added as directories appear. Overlapping watches
// share those inotify watches: each directory is a node, reference-counted
// by the watches that route its events, and an event goes to every watch
// whose tree holds it, once.
//
// The race this package exists to close: a directory created inside a
// recursive tree is unwatched until its Create event has been read, so
// anything created in it meanwhile (mkdir -p a/b/c && touch a/b/c/f) makes
// no event. On every new directory the watch is added first and the
// directory is then scanned; entries found are reported as creates, and the
// queued Create events for those same names are dropped as duplicates.
//
// Loss is announced, never hidden: a kernel queue overflow becomes an
// `overflow` event on every watch (followed by a rescan that re-adds missed
// directories), and a stream whose 10,000-event buffer drops unread events
// gets a gap from the stream package plus an `overflow` event.
//
// Concurrency: Manager methods may be called from any goroutine. One
// goroutine, owned by the Manager and stopped by Close, reads fsnotify;
// it and the methods share one mutex, and appends to stream logs happen
// under it (watch streams drop instead of blocking, so this never waits).
package watch
