package ptymux

import "time"

// Hooks for tests only.

var LoginShell = loginShell

// SetPasswd makes the manager look login shells up in another file.
func (m *Manager) SetPasswd(path string) { m.passwd = path }

// SetTimings shortens how long the manager waits at the end of a PTY.
func (m *Manager) SetTimings(drain, hangupGrace, killGrace time.Duration) {
	m.drain, m.hangupGrace, m.killGrace = drain, hangupGrace, killGrace
}
