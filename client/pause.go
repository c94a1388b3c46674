package client

import "context"

// PauseOptions is the body of POST /v1/pause; zero fields take the
// agent's defaults.
type PauseOptions struct {
	// Mode is "memory" (a memory snapshot follows; the default) or
	// "filesystem" (only the disk is saved: the filesystems are frozen).
	Mode string `json:"mode,omitempty"`
	// Shrink is "none" (the default), "cache" or "all": how much memory
	// the agent gives back before the snapshot (protocol section 11.7).
	Shrink string `json:"shrink,omitempty"`
	// DeadlineMs bounds the answer (default 1,000): past it the agent
	// answers with what it finished.
	DeadlineMs int64 `json:"deadline_ms,omitempty"`
	// ThawAfterMs: without a resume or abort for that long (the guest's
	// time, which stands still while the VM is frozen), the agent thaws
	// by itself (default 30,000).
	ThawAfterMs int64 `json:"thaw_after_ms,omitempty"`
}

// PauseAnswer is what a pause did.
type PauseAnswer struct {
	State              string      `json:"state"` // "paused", or "pausing" past the deadline
	Generation         uint64      `json:"generation"`
	Mode               string      `json:"mode"`
	Shrink             string      `json:"shrink"`
	Steps              []PauseStep `json:"steps"`
	MemAvailableBefore int64       `json:"mem_available_before"`
	MemAvailableAfter  int64       `json:"mem_available_after"`
	DurationMs         float64     `json:"duration_ms"`
	DeadlinePassed     bool        `json:"deadline_passed"`
	ThawAfterMs        int64       `json:"thaw_after_ms"`
	AtUnixMs           int64       `json:"at_unix_ms"`
	// Hooks are the pre-pause hooks' results.
	Hooks []HookResult `json:"hooks"`
}

// Step finds a step by name ("notify", "freeze", "sync", "fsfreeze",
// "shrink"); ok is false if the pause had none.
func (a PauseAnswer) Step(name string) (PauseStep, bool) {
	for _, s := range a.Steps {
		if s.Step == name {
			return s, true
		}
	}
	return PauseStep{}, false
}

// PauseStep is one step of a lifecycle sequence: a pause, a thaw or a
// resume.
type PauseStep struct {
	Step string `json:"step"`
	// Status is "done", "skipped", "failed", "running" (still running
	// when the answer was due) or "not_started".
	Status string  `json:"status"`
	Ms     float64 `json:"ms"`
	Detail string  `json:"detail"`
}

// PauseEnd is how the last pause ended: Ended is "resume", "abort" or
// "auto_thaw".
type PauseEnd struct {
	AtUnixMs int64       `json:"at_unix_ms"`
	Mode     string      `json:"mode"`
	Shrink   string      `json:"shrink"`
	Ended    string      `json:"ended"`
	PausedMs int64       `json:"paused_ms"`
	Thaw     []PauseStep `json:"thaw"`
}

// AbortAnswer is what calling a pause off did.
type AbortAnswer struct {
	State      string      `json:"state"` // "running"
	Generation uint64      `json:"generation"`
	PausedMs   int64       `json:"paused_ms"`
	Thaw       []PauseStep `json:"thaw"`
}

// Pause asks the agent to quiesce the sandbox before the host pauses or
// snapshots the VM: clients are told, user work is frozen, filesystems
// are synced. Call Resume after the restore, or AbortPause if the VM was
// not paused after all.
func (h Host) Pause(ctx context.Context, o PauseOptions) (PauseAnswer, error) {
	var out PauseAnswer
	return out, h.post(ctx, "/v1/pause", o, &out)
}

// AbortPause calls off the pause in place: user work runs again and the
// generation stays. Without a pause the agent answers conflict.
func (h Host) AbortPause(ctx context.Context) (AbortAnswer, error) {
	var out AbortAnswer
	return out, h.post(ctx, "/v1/pause/abort", struct{}{}, &out)
}

// Pause is Host.Pause with the client's address and token.
func (c *Client) Pause(ctx context.Context, o PauseOptions) (PauseAnswer, error) {
	return c.host().Pause(ctx, o)
}

// AbortPause is Host.AbortPause with the client's address and token.
func (c *Client) AbortPause(ctx context.Context) (AbortAnswer, error) {
	return c.host().AbortPause(ctx)
}
