package resume

import (
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// The lifecycle feed is a file for programs that are not hooks: they read
// it, or watch it with inotify (it is replaced whole, by a rename, at every
// change: a pause, its end, a resume), to learn that the sandbox was paused
// and resumed or cloned.

// Lifecycle is the lifecycle file's content.
type Lifecycle struct {
	Generation uint64 `json:"resume_generation"`
	// State is "running" or "paused" (a host's pause is in place).
	State     string `json:"state"`
	SandboxID string `json:"sandbox_id,omitempty"`
	// Clone: the last resume made this a new sandbox (another sandbox_id).
	Clone            bool  `json:"clone"`
	LastPauseUnixMs  int64 `json:"last_pause_unix_ms,omitempty"`
	LastResumeUnixMs int64 `json:"last_resume_unix_ms,omitempty"`
	// PausedMs is how long the pause before the last resume lasted.
	PausedMs int64 `json:"paused_ms,omitempty"`
	// UpdatedUnixMs is when the file was written.
	UpdatedUnixMs int64 `json:"updated_unix_ms"`
}

// lifecycle is the feed's current content.
func (m *Manager) lifecycle() Lifecycle {
	st := m.State()
	l := Lifecycle{Generation: st.Generation, State: "running", SandboxID: st.SandboxID, UpdatedUnixMs: time.Now().UnixMilli()}
	if st.Pause != nil {
		l.State = "paused"
		l.LastPauseUnixMs = st.Pause.AtUnixMs
	} else if st.LastPause != nil {
		l.LastPauseUnixMs = st.LastPause.AtUnixMs
	}
	if r := st.LastResume; r != nil {
		l.LastResumeUnixMs, l.Clone = r.AtUnixMs, r.NewSandbox
		if r.PausedMs != nil {
			l.PausedMs = *r.PausedMs
		}
	}
	return l
}

// writeLifecycle replaces the lifecycle file, if there is one, with the
// current state: a temporary file renamed over it, so a reader never sees
// half of it and inotify sees one IN_MOVED_TO.
func (m *Manager) writeLifecycle() {
	if m.o.LifecycleFile == "" {
		return
	}
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	b, _ := json.Marshal(m.lifecycle())
	err := os.MkdirAll(filepath.Dir(m.o.LifecycleFile), 0o755)
	if err == nil {
		// Not synced: /run is memory, and the file is rewritten at the
		// next change anyway.
		err = replaceFile(m.o.LifecycleFile, append(b, '\n'), 0o644, false)
	}
	if err != nil {
		m.log.Warn("lifecycle file", zap.Error(err))
	}
}

// sandboxID is the sandbox the host last named.
func (m *Manager) sandboxID() string {
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	return m.sandbox
}
