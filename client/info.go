package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// StreamInfo is one stream as `list` reports it.
type StreamInfo struct {
	Stream  uint64            `json:"stream"`
	Kind    Kind              `json:"kind"`
	Pid     int               `json:"pid"`
	Tag     string            `json:"tag"`
	Argv    []string          `json:"argv"`
	State   string            `json:"state"` // "running" or "ended"
	Cursors map[string]uint64 `json:"cursors"`
	End     *End              `json:"end"`
}

// List returns the agent's streams of a kind ("" for all), in id order.
func (c *Client) List(ctx context.Context, kind Kind) ([]StreamInfo, error) {
	res, err := c.call(ctx, "list", struct {
		Kind Kind `json:"kind,omitempty"`
	}{kind}, callOpts{retry: true})
	if err != nil {
		return nil, fmt.Errorf("client: list: %w", err)
	}
	var r struct {
		Streams []StreamInfo `json:"streams"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return nil, protocolErrorf("list result: %v", err)
	}
	return r.Streams, nil
}

// Health is the agent's GET /health.
type Health struct {
	Status           string         `json:"status"`
	Version          string         `json:"version"`
	Instance         string         `json:"instance"`
	SandboxID        string         `json:"sandbox_id"`
	ResumeGeneration uint64         `json:"resume_generation"`
	KernelStateLost  bool           `json:"kernel_state_lost"`
	Kernels          []KernelHealth `json:"kernels"`
	LastResume       *LastResume    `json:"last_resume"`
	UptimeMs         int64          `json:"uptime_ms"`
	// Isolation says whether user work runs in its own limited cgroup
	// (with the token only).
	Isolation *Isolation `json:"isolation"`
	// Paused: a host's pause is in place (without the token too); Pause
	// is that pause and LastPause how the last one ended (with the token).
	Paused    bool         `json:"paused"`
	Pause     *PauseAnswer `json:"pause"`
	LastPause *PauseEnd    `json:"last_pause"`
	// Upgrades is how many times the agent was upgraded in place (Host.Upgrade);
	// LastUpgrade how the last upgrade went, done or failed.
	Upgrades    int            `json:"upgrades"`
	LastUpgrade *UpgradeAnswer `json:"last_upgrade"`
}

// Isolation is the user cgroup's state: on, with what user work uses, or
// off and why.
type Isolation struct {
	State         string `json:"state"` // "on" or "off"
	Reason        string `json:"reason"`
	MemoryCurrent int64  `json:"memory_current"`
	MemoryPeak    int64  `json:"memory_peak"`
	MemoryMax     int64  `json:"memory_max"`
	MemoryHigh    int64  `json:"memory_high"`
	Tasks         int64  `json:"tasks"`
	TasksMax      int64  `json:"tasks_max"`
	OOMKills      int64  `json:"oom_kills"`
	// RunawayKills counts the commands the agent's process guard killed
	// for holding too many processes (a fork bomb).
	RunawayKills int64 `json:"runaway_kills"`
	ForkRefusals int64 `json:"fork_refusals"`
	// SpareStarts counts the commands that started in the spare, kept
	// for the user's way out, because user work was at its task limit or
	// stalled at its memory limit.
	SpareStarts int64   `json:"spare_starts"`
	CPUPressure float64 `json:"cpu_pressure_avg10"`
}

// LastResume describes the agent's most recent resume sequence.
type LastResume struct {
	Source     string `json:"source"`
	ResumeID   string `json:"resume_id"`
	AtUnixMs   int64  `json:"at_unix_ms"`
	DurationMs int64  `json:"duration_ms"`
	// Reseeded: the guest's CRNG took a new key at this resume, from
	// EntropySources (names only).
	Reseeded           bool                `json:"reseeded"`
	EntropySources     []string            `json:"entropy_sources"`
	ReseedError        string              `json:"reseed_error"`
	KernelsReseeded    []string            `json:"kernels_reseeded"`
	KernelsNotReseeded []KernelNotReseeded `json:"kernels_not_reseeded"`
	// NewSandbox: the resume named another sandbox, and the agent took a
	// new identity (a new Instance).
	NewSandbox bool `json:"new_sandbox"`
	// PausedMs: how long the host's pause before this resume lasted, from
	// its /v1/pause to the thaw; nil when none came before.
	PausedMs *int64 `json:"paused_ms"`
	// Hooks are the post-clone and post-resume hooks' results.
	Hooks []HookResult `json:"hooks"`
	// ConnectionsReset are the TCP connections to other machines the
	// resume reset (a clone, or a pause longer than the agent's
	// --stale-connection-seconds); ResetError says what failed.
	ConnectionsReset []Conn `json:"connections_reset"`
	ResetError       string `json:"reset_error"`
	// Network is what the network repair did, in a sandbox VM.
	Network *NetworkRepair `json:"network"`
	// Steps are the resume sequence's steps, in order, once it is over
	// (protocol.md section 7); LateSteps what later reports of the same
	// restore did (the host's after the guest noticed it by itself).
	Steps     []PauseStep `json:"steps"`
	LateSteps []PauseStep `json:"late_steps"`
}

// NetworkRepair is what a resume did to the guest's network.
type NetworkRepair struct {
	Interface         string   `json:"interface"`
	NeighboursFlushed int      `json:"neighbours_flushed"`
	Announced         []string `json:"announced"`
	Changed           []string `json:"changed"`
	Error             string   `json:"error"`
}

// HookResult is what one lifecycle hook did.
type HookResult struct {
	Hook       string  `json:"hook"`
	Event      string  `json:"event"` // pre-pause, post-resume, post-clone
	ExitCode   *int    `json:"exit_code"`
	Signal     string  `json:"signal"`
	DurationMs float64 `json:"duration_ms"`
	// TimedOut: its own timeout killed it; Killed says why the agent
	// killed it otherwise (the event's hooks used their bound, the
	// pause was overtaken).
	TimedOut bool   `json:"timed_out"`
	Killed   string `json:"killed"`
	// Running: it still runs (a pause's answer while its hooks run).
	Running bool `json:"running"`
	// Refused says why it did not run (writable by others, not
	// executable, ...); NotStarted why it was not tried.
	Refused    string `json:"refused"`
	NotStarted string `json:"not_started"`
	StderrTail string `json:"stderr_tail"`
}

// Conn is a TCP connection, as the agent reports it.
type Conn struct {
	Local  string `json:"local"`
	Remote string `json:"remote"`
}

// KernelNotReseeded is a kernel a resume could not reseed, and why.
type KernelNotReseeded struct {
	Kernel string `json:"kernel"`
	Reason string `json:"reason"`
}

// KernelHealth is one kernel in Health.
type KernelHealth struct {
	Kernel string `json:"kernel"`
	State  string `json:"state"`
}

// Traffic is the agent's GET /v1/traffic.
type Traffic struct {
	BytesIn            uint64 `json:"bytes_in"`
	BytesOut           uint64 `json:"bytes_out"`
	LastActivityUnixMs int64  `json:"last_activity_unix_ms"`
	IdleMs             int64  `json:"idle_ms"`
	Connections        int64  `json:"connections"`
	IdlePolicy         *struct {
		MaxIdleSeconds int64 `json:"max_idle_seconds"`
	} `json:"idle_policy"`
	Idle  bool       `json:"idle"`
	Holds []HoldInfo `json:"holds"`
}

// Health reads the agent's /health. It needs no connection.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	return h, c.getJSON(ctx, "/health", &h)
}

// Traffic reads the agent's /v1/traffic (not counted as traffic itself).
func (c *Client) Traffic(ctx context.Context) (Traffic, error) { return c.host().Traffic(ctx) }

// GetHealth reads /health from the agent at url without a websocket and
// without the token: what a host's probe needs (status, version,
// instance, resume_generation, kernel_state_lost); the rest needs the
// token (Client.Health, Host.Health).
func GetHealth(ctx context.Context, url string, httpClient *http.Client) (Health, error) {
	base, _, dial, err := endpointURLs(url)
	if err != nil {
		return Health{}, err
	}
	var h Health
	return h, getJSON(ctx, withDialer(httpClient, dial), base+"/health", "", &h)
}

func (c *Client) getJSON(ctx context.Context, path string, v any) error {
	return getJSON(ctx, c.opts.HTTPClient, c.httpBase+path, c.accessToken(), v)
}

func getJSON(ctx context.Context, hc *http.Client, url, token string, v any) error {
	if hc == nil {
		hc = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("client: GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("client: GET %s: %w", url, err)
	}
	return decodeAnswer("GET "+url, resp.StatusCode, body, v)
}

// decodeAnswer decodes an HTTP answer of the agent into v, or its error
// body into an error.
func decodeAnswer(what string, status int, body []byte, v any) error {
	if status == http.StatusUnauthorized {
		return fmt.Errorf("%w: %s", ErrUnauthorized, what)
	}
	if status != http.StatusOK {
		var e struct {
			Error *Error `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != nil {
			return fmt.Errorf("client: %s: HTTP %d: %w", what, status, e.Error)
		}
		return fmt.Errorf("client: %s: HTTP %d", what, status)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("client: %s: %w", what, err)
	}
	return nil
}
