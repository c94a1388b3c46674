package resume

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Lifecycle hooks: the sandbox's own programs learn of pauses, resumes
// and clones. Executables in HOOKS/pre-pause.d run inside a pause before
// user work freezes; HOOKS/post-clone.d and post-resume.d after the thaw,
// before the resume publishes its generation (health says ready). Each
// runs in name order (run-parts' names only: hookName), as its file's
// owner, with a timeout past which its process group is killed; all of an
// event's hooks together have a bound of their own, so none, and no
// number of them, can hold the sandbox longer. Who may write a hook and
// its directories is checked on the descriptor that is then executed
// (hookpath.go).

// HookEvent names a hook directory (EVENT.d) and RAYITO_EVENT.
type HookEvent string

const (
	HookPrePause   HookEvent = "pre-pause"
	HookPostResume HookEvent = "post-resume"
	HookPostClone  HookEvent = "post-clone"
)

// DefaultHookTimeout bounds one hook.
const DefaultHookTimeout = 5 * time.Second

// DefaultHooksTotal bounds all of one event's hooks together: a resume
// answers within seconds however many hooks hang.
const DefaultHooksTotal = 10 * time.Second

// hookTailBytes is how much of a hook's stderr its result keeps.
const hookTailBytes = 2048

// hookDrainWait is how long a hook's stderr is read after the hook
// ended: a daemon it started may hold the pipe open for good.
const hookDrainWait = 100 * time.Millisecond

// hookFD is the descriptor number the checked hook has in its own
// process: it is executed as /proc/self/fd/3, so the file run is the one
// checked, and a script's interpreter opens that same file.
const hookFD = 3

// HookResult is what one hook did, for the pause's answer and health.
type HookResult struct {
	Hook       string    `json:"hook"`
	Event      HookEvent `json:"event"`
	ExitCode   *int      `json:"exit_code,omitempty"`
	Signal     string    `json:"signal,omitempty"`
	DurationMs float64   `json:"duration_ms"`
	// TimedOut: the hook's own timeout (--hook-timeout) killed it.
	TimedOut bool `json:"timed_out,omitempty"`
	// Killed says why the agent killed it otherwise: the event's hooks
	// used their whole bound, or the pause was overtaken.
	Killed string `json:"killed,omitempty"`
	// Running: the hook runs still (a pause's answer while its hooks run).
	Running bool `json:"running,omitempty"`
	// Refused says why the hook did not run (writable by others, not
	// executable, not a regular file, could not start); NotStarted why
	// it was not tried (the event's bound was spent, the pause overtaken).
	Refused    string `json:"refused,omitempty"`
	NotStarted string `json:"not_started,omitempty"`
	StderrTail string `json:"stderr_tail,omitempty"`
}

// HookExit is how a hook's process ended.
type HookExit struct {
	Code   *int   // nil if a signal ended it
	Signal string // its name, if one did
}

// HookSpawner starts a hook's process (in the hooks' cgroup: proc.Reaper
// does) and returns its pid and a channel that receives its exit once.
type HookSpawner func(path string, argv []string, attr *syscall.ProcAttr) (pid int, exited <-chan HookExit, err error)

// Hooks runs the hooks of one directory tree.
type Hooks struct {
	Dir     string
	Timeout time.Duration // one hook; 0 is DefaultHookTimeout
	Total   time.Duration // one event's hooks together; 0 is DefaultHooksTotal
	Spawn   HookSpawner
	// Groups lists a group's members, for group-writable files; nil
	// reads /etc/passwd and /etc/group at each round.
	Groups func(gid uint32) []uint32
}

// HookEnv is what every hook of one event is told.
type HookEnv struct {
	Generation uint64
	PausedMs   int64
	SandboxID  string
	Clone      bool
}

func (e HookEnv) environ(event HookEvent, hook string) []string {
	clone := "0"
	if e.Clone {
		clone = "1"
	}
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"RAYITO_EVENT=" + string(event),
		"RAYITO_HOOK=" + hook,
		"RAYITO_RESUME_GENERATION=" + strconv.FormatUint(e.Generation, 10),
		"RAYITO_PAUSED_MS=" + strconv.FormatInt(e.PausedMs, 10),
		"RAYITO_SANDBOX_ID=" + e.SandboxID,
		"RAYITO_CLONE=" + clone,
	}
}

// Run runs the hooks of event in name order and reports each. A missing
// directory has no hooks. Once ctx ends (its cause says why) or the
// event's bound is spent, a running hook is killed and no other starts.
// progress, if not nil, is called with the results so far each time a
// hook starts or ends (the running one last, Running set).
func (h *Hooks) Run(ctx context.Context, event HookEvent, env HookEnv, progress func([]HookResult)) []HookResult {
	if h == nil || h.Dir == "" {
		return nil
	}
	d, err := openHookDir(h.Dir, event)
	if errors.Is(err, os.ErrNotExist) {
		return nil // no directory, no hooks
	}
	if err != nil {
		return []HookResult{{Hook: filepath.Join(h.Dir, string(event)+".d"), Event: event, Refused: err.Error()}}
	}
	defer d.close()
	names, err := listHooks(d.fd)
	if err != nil {
		return []HookResult{{Hook: d.path, Event: event, Refused: err.Error()}}
	}
	total := h.Total
	if total <= 0 {
		total = DefaultHooksTotal
	}
	bound, cancel := context.WithTimeoutCause(ctx, total, fmt.Errorf("the %s hooks used their whole bound (%s)", event, total))
	defer cancel()
	members := h.Groups
	if members == nil {
		members = groupMembers("/etc/passwd", "/etc/group")
	}
	results := []HookResult{}
	for _, name := range names {
		path := filepath.Join(d.path, name)
		if bound.Err() != nil {
			results = append(results, HookResult{Hook: path, Event: event, NotStarted: context.Cause(bound).Error()})
			continue
		}
		r := h.runOne(bound, d, name, event, env, members, func(r HookResult) {
			if progress != nil {
				progress(append(slices.Clip(results), r))
			}
		})
		results = append(results, r)
		if progress != nil {
			progress(slices.Clone(results))
		}
	}
	return results
}

// listHooks reads the names of a hook directory that may run, sorted.
func listHooks(dirfd int) ([]string, error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reading the hook directory: %w", err)
	}
	f := os.NewFile(uintptr(fd), "hooks")
	defer f.Close()
	all, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("reading the hook directory: %w", err)
	}
	names := slices.DeleteFunc(all, func(n string) bool { return !hookName(n) })
	slices.Sort(names)
	return names, nil
}

// checkHook opens a hook by name in d without following a symlink and
// says why it may not run ("" if it may), with its owner's ids.
func checkHook(d *hookDir, name string, members func(uint32) []uint32) (fd int, st unix.Stat_t, refused string) {
	fd, err := unix.Openat(d.fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, st, err.Error()
	}
	refuse := func(why string) (int, unix.Stat_t, string) {
		unix.Close(fd)
		return -1, st, why
	}
	if err := unix.Fstat(fd, &st); err != nil {
		return refuse(err.Error())
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return refuse("a symbolic link: a hook must be a regular file in its directory")
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return refuse("not a regular file")
	}
	if why := writableByOthers(st.Mode, st.Uid, st.Gid, st.Uid, false, members); why != "" {
		return refuse(why + ": anyone who can write it could make it run as its owner")
	}
	if st.Mode&0o111 == 0 {
		return refuse("not executable")
	}
	if why := d.refusedPath(st.Uid, members); why != "" {
		return refuse(why)
	}
	return fd, st, ""
}

// runOne checks one hook and runs it as its owner; running is told when
// it starts.
func (h *Hooks) runOne(ctx context.Context, d *hookDir, name string, event HookEvent, env HookEnv, members func(uint32) []uint32, running func(HookResult)) HookResult {
	path := filepath.Join(d.path, name)
	r := HookResult{Hook: path, Event: event}
	fd, st, refused := checkHook(d, name, members)
	if refused != "" {
		r.Refused = refused
		return r
	}
	defer unix.Close(fd)
	attr := &syscall.ProcAttr{Env: env.environ(event, path), Dir: "/", Sys: &syscall.SysProcAttr{Setsid: true}}
	if st.Uid != 0 {
		// As the file's owner, never with more rights than it has.
		attr.Sys.Credential = &syscall.Credential{Uid: st.Uid, Gid: st.Gid}
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
	attr.Files = []uintptr{null.Fd(), null.Fd(), pw.Fd(), uintptr(fd)}
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = DefaultHookTimeout
	}
	started := time.Now()
	pid, exited, err := h.Spawn("/proc/self/fd/"+strconv.Itoa(hookFD), []string{path}, attr)
	pw.Close()
	if err != nil {
		pr.Close()
		r.Refused = fmt.Sprintf("cannot start: %v", err)
		return r
	}
	running(HookResult{Hook: path, Event: event, Running: true})
	tail := &tailBuffer{max: hookTailBytes}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		io.Copy(tail, pr)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	var ex HookExit
	kill := false
	select {
	case ex = <-exited:
	case <-t.C:
		r.TimedOut, kill = true, true
	case <-ctx.Done():
		r.Killed, kill = context.Cause(ctx).Error(), true
	}
	if kill {
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
	return r.Refused != "" || r.NotStarted != "" || r.TimedOut || r.Killed != "" || r.ExitCode == nil || *r.ExitCode != 0
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
