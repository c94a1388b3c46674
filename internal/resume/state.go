package resume

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/rayito/rayito-agent/internal/netconf"
)

// State is what /health reports about resumes and kernels.
type State struct {
	Generation uint64 `json:"resume_generation"`
	// SandboxID is the sandbox the host last said this is (/v1/init,
	// /v1/resume); "" until it says.
	SandboxID       string         `json:"sandbox_id,omitempty"`
	KernelStateLost bool           `json:"kernel_state_lost"`
	Kernels         []KernelHealth `json:"kernels"`
	LastResume      *LastResume    `json:"last_resume,omitempty"`
	// Pause is the pause in place (the host's /v1/pause), nil when none;
	// LastPause how the last one ended.
	Pause     *PauseAnswer `json:"pause,omitempty"`
	LastPause *PauseEnd    `json:"last_pause,omitempty"`
	// Upgrades is how many upgrades this sandbox's agent took (upgrade.go);
	// LastUpgrade how the last one went, done or failed.
	Upgrades    int            `json:"upgrades"`
	LastUpgrade *UpgradeAnswer `json:"last_upgrade,omitempty"`
}

// KernelHealth is one kernel as /health reports it.
type KernelHealth struct {
	Kernel string `json:"kernel"`
	State  string `json:"state"`
}

// LastResume describes the most recent resume sequence.
type LastResume struct {
	Source     Source `json:"source"`
	ResumeID   string `json:"resume_id,omitempty"`
	AtUnixMs   int64  `json:"at_unix_ms"`
	DurationMs int64  `json:"duration_ms"`
	// Reseeded: the kernel CRNG took a new key from material that differs
	// per clone (clone.go). False on a cold boot (a fresh CRNG), with
	// --reseed-on-resume=false, or without CAP_SYS_ADMIN (ReseedError).
	Reseeded bool `json:"reseeded"`
	// EntropySources names what the material came from ("host", "hwrng",
	// "rdseed" or "rdrand", "time", "vmclock"); never the bytes.
	EntropySources []string `json:"entropy_sources"`
	ReseedError    string   `json:"reseed_error,omitempty"`
	// KernelsReseeded are the Python kernels whose PRNGs were reseeded;
	// KernelsNotReseeded the kernels that were not, and why.
	KernelsReseeded    []string            `json:"kernels_reseeded"`
	KernelsNotReseeded []KernelNotReseeded `json:"kernels_not_reseeded"`
	// NewSandbox: the report named another sandbox than the last, and the
	// agent took a new identity (clone.go).
	NewSandbox bool `json:"new_sandbox,omitempty"`
	// PausedMs is how long the sandbox was paused, from the host's
	// /v1/pause to this resume's thaw (guest time: the time the VM was
	// frozen is in it only once the clock was set); absent without one.
	PausedMs *int64 `json:"paused_ms,omitempty"`
	// Hooks are the post-clone and post-resume hooks' results.
	Hooks []HookResult `json:"hooks,omitempty"`
	// ConnectionsReset are the TCP connections to other machines the
	// resume reset (a clone, or a long pause: netreset.go); ResetError
	// says what failed.
	ConnectionsReset []Conn `json:"connections_reset,omitempty"`
	ResetError       string `json:"reset_error,omitempty"`
	// Network is what the network repair did: the host's facts applied,
	// neighbours forgotten, addresses announced.
	Network *netconf.Report `json:"network,omitempty"`
	// Steps are the sequence's steps (resumesteps.go), once it is over.
	Steps []Step `json:"steps,omitempty"`
	// LateSteps are what later reports of the same restore did (the
	// host's report after a guest detector's): the steps that brought
	// something, appended in their order.
	LateSteps []Step `json:"late_steps,omitempty"`
}

// withLists returns l with empty lists where it has none, so that
// /health shows [] rather than null; nil stays nil.
func (l *LastResume) withLists() *LastResume {
	if l == nil || (l.EntropySources != nil && l.KernelsReseeded != nil && l.KernelsNotReseeded != nil) {
		return l
	}
	c := *l
	if c.EntropySources == nil {
		c.EntropySources = []string{}
	}
	if c.KernelsReseeded == nil {
		c.KernelsReseeded = []string{}
	}
	if c.KernelsNotReseeded == nil {
		c.KernelsNotReseeded = []KernelNotReseeded{}
	}
	return &c
}

// KernelNotReseeded is a kernel a resume could not reseed.
type KernelNotReseeded struct {
	Kernel string `json:"kernel"`
	Reason string `json:"reason"`
}

// persisted is the state file: enough to notice a cold boot on the same
// disk and to report the kernels it lost.
type persisted struct {
	Generation uint64   `json:"generation"`
	BootID     string   `json:"boot_id"`
	Kernels    []string `json:"kernels"`
	// SandboxID is the last sandbox id the host gave (clone.go).
	SandboxID string `json:"sandbox_id,omitempty"`
}

const stateFile = "state.json"

func loadState(dir string) (persisted, bool, error) {
	var p persisted
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return p, false, nil
	}
	if err != nil {
		return p, false, err
	}
	// Every save writes both fields: a file without them ("null", "{}")
	// is damaged, and reading it as generation 0 would reset it silently.
	var check struct {
		Generation *uint64 `json:"generation"`
		BootID     *string `json:"boot_id"`
	}
	if err := json.Unmarshal(b, &check); err == nil && (check.Generation == nil || check.BootID == nil) {
		err = errors.New("generation or boot_id missing")
		return p, false, fmt.Errorf("%s is damaged (%w); remove it to start over from generation 0", filepath.Join(dir, stateFile), err)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, false, fmt.Errorf("%s is damaged (%w); remove it to start over from generation 0", filepath.Join(dir, stateFile), err)
	}
	return p, true, nil
}

// saveState writes the file atomically: a crash leaves the old or the new
// state, never a torn one.
func saveState(dir string, p persisted) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return replaceFile(filepath.Join(dir, stateFile), b, 0o600, true)
}

// replaceFile replaces path with b whole: a temporary file in its
// directory renamed over it, so a reader sees the old content or the new,
// never half. durable also syncs the file and then the directory, so a
// crash right after leaves the new content.
func replaceFile(path string, b []byte, perm os.FileMode, durable bool) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Chmod(perm)
	}
	if err == nil && durable {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil || !durable {
		return err
	}
	// The rename is durable only once the directory is.
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// bootID identifies this boot of the kernel; it survives a snapshot
// restore (memory is restored) but not a cold boot.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
