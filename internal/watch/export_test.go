package watch

// InotifyWatches is how many inotify watches fsnotify holds for m.
func (m *Manager) InotifyWatches() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fsw == nil {
		return 0
	}
	return len(m.fsw.WatchList())
}

// Nodes is how many directories m tracks.
func (m *Manager) Nodes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.nodes)
}

// Stall stops m from routing events until resume is called, so that the
// kernel's inotify queue fills up.
func (m *Manager) Stall() (resume func()) {
	m.mu.Lock()
	return m.mu.Unlock
}
