package resume

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Lifecycle hooks: the sandbox's own programs learn of pauses, resumes
// and clones. Executables in HOOKS/pre-pause.d run inside a pause before
// user work freezes; HOOKS/post-clone.d and post-resume.d after the thaw,
// before the resume publishes its generation (health says ready). Each
// runs in name order, as its file's owner, in the user cgroup, with a
// timeout past which its process group is killed; none can hold the
// sandbox longer than its timeout.

// HookEvent names a hook directory (EVENT.d) and RAYITO_EVENT.
type HookEvent string

const (
	HookPrePause   HookEvent = "pre-pause"
	HookPostResume HookEvent = "post-resume"
	HookPostClone  HookEvent = "post-clone"
)

// DefaultHookTimeout bounds one hook.
const DefaultHookTimeout = 5 * time.Second

// hookTailBytes is how much of a hook's stderr its result keeps.
const hookTailBytes = 2048

// hookDrainWait is how long a hook's stderr is read after the hook
// ended: a daemon it started may hold the pipe open for good.
const hookDrainWait = 100 * time.Millisecond

// HookResult is what one hook did, for the pause's answer and health.
type HookResult struct {
	Hook       string    `json:"hook"`
	Event      HookEvent `json:"event"`
	ExitCode   *int      `json:"exit_code,omitempty"`
	Signal     string    `json:"signal,omitempty"`
	DurationMs float64   `json:"duration_ms"`
	TimedOut   bool      `json:"timed_out,omitempty"`
	// Refused says why the hook did not run (writable by others, not
	// executable, not a regular file, could not start).
	Refused    string `json:"refused,omitempty"`
	StderrTail string `json:"stderr_tail,omitempty"`
}

// HookExit is how a hook's process ended.
type HookExit struct {
	Code   *int   // nil if a signal ended it
	Signal string // its name, if one did
}

// HookSpawner starts a hook's process (in the user cgroup: proc.Reaper
// does) and returns its pid and a channel that receives its exit once.
type HookSpawner func(path string, argv []string, attr *syscall.ProcAttr) (pid int, exited <-chan HookExit, err error)

// Hooks runs the hooks of one directory tree.
type Hooks struct {
	Dir     string
	Timeout time.Duration
	Spawn   HookSpawner
}

// HookEnv is what every hook of one event is told.
type HookEnv struct {
	Generation uint64
	PausedMs   int64
	SandboxID  string
	Clone      bool
}

func (e HookEnv) environ(event HookEvent) []string {
	clone := "0"
	if e.Clone {
		clone = "1"
	}
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"RAYITO_EVENT=" + string(event),
		"RAYITO_RESUME_GENERATION=" + strconv.FormatUint(e.Generation, 10),
		"RAYITO_PAUSED_MS=" + strconv.FormatInt(e.PausedMs, 10),
		"RAYITO_SANDBOX_ID=" + e.SandboxID,
		"RAYITO_CLONE=" + clone,
	}
}

// Run runs the hooks of event in name order and reports each. A missing
// directory has no hooks. ctx bounds them all.
func (h *Hooks) Run(ctx context.Context, event HookEvent, env HookEnv) []HookResult {
	if h == nil || h.Dir == "" {
		return nil
	}
	dir := filepath.Join(h.Dir, string(event)+".d")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil // no directory, no hooks
	}
	results := []HookResult{}
	dirRefused := ""
	if st, err := os.Stat(dir); err == nil && st.Mode().Perm()&0o002 != 0 {
		dirRefused = "its directory " + dir + " is writable by others"
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	for _, name := range names {
		path := filepath.Join(dir, name)
		r := HookResult{Hook: path, Event: event}
		if dirRefused != "" {
			r.Refused = dirRefused
		} else {
			r = h.runOne(ctx, path, event, env)
		}
		results = append(results, r)
	}
	return results
}

// runOne checks one hook and runs it as its owner.
func (h *Hooks) runOne(ctx context.Context, path string, event HookEvent, env HookEnv) HookResult {
	r := HookResult{Hook: path, Event: event}
	st, err := os.Stat(path)
	switch {
	case err != nil:
		r.Refused = err.Error()
		return r
	case !st.Mode().IsRegular():
		r.Refused = "not a regular file"
		return r
	case st.Mode().Perm()&0o002 != 0:
		r.Refused = "writable by others: anyone could make it run as its owner"
		return r
	case st.Mode().Perm()&0o111 == 0:
		r.Refused = "not executable"
		return r
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	attr := &syscall.ProcAttr{Env: env.environ(event), Dir: "/", Sys: &syscall.SysProcAttr{Setsid: true}}
	if sys != nil && sys.Uid != 0 {
		// As the file's owner, never with more rights than it has.
		attr.Sys.Credential = &syscall.Credential{Uid: sys.Uid, Gid: sys.Gid}
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		r.Refused = err.Error()
		return r
	}
	defer null.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		r.Refused = err.Error()
		return r
	}
	// stdout is dropped: a hook that floods it costs nothing; stderr's
	// tail is kept for the report.
	attr.Files = []uintptr{null.Fd(), null.Fd(), pw.Fd()}
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = DefaultHookTimeout
	}
	started := time.Now()
	pid, exited, err := h.Spawn(path, []string{path}, attr)
	pw.Close()
	if err != nil {
		pr.Close()
		r.Refused = fmt.Sprintf("cannot start: %v", err)
		return r
	}
	tail := &tailBuffer{max: hookTailBytes}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		io.Copy(tail, pr)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	var ex HookExit
	select {
	case ex = <-exited:
	case <-t.C:
		r.TimedOut = true
	case <-ctx.Done():
		r.TimedOut = true
	}
	if r.TimedOut {
		syscall.Kill(-pid, syscall.SIGKILL)
		ex = <-exited
	}
	r.DurationMs = ms(time.Since(started))
	r.ExitCode, r.Signal = ex.Code, ex.Signal
	select {
	case <-drained:
	case <-time.After(hookDrainWait):
	}
	pr.Close()
	<-drained
	r.StderrTail = tail.String()
	return r
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// hookFailed reports whether a hook result is anything but a clean exit.
func hookFailed(r HookResult) bool {
	return r.Refused != "" || r.TimedOut || r.ExitCode == nil || *r.ExitCode != 0
}

// hooksDetail says in a few words how a round of hooks went.
func hooksDetail(rs []HookResult) string {
	failed := 0
	for _, r := range rs {
		if hookFailed(r) {
			failed++
		}
	}
	return fmt.Sprintf("%d hooks, %d failed", len(rs), failed)
}
