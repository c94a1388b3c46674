// Package hostapi serves the host's calls: /health, /v1/init, /v1/pause,
// /v1/resume, /v1/traffic and /metrics. They are a surface of their own on the shared
// layer, served on reserve connections too, so that the host sees and
// controls the sandbox even while other clients flood it.
package hostapi

import (
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/traffic"
)

// Config is what the host API needs. Resume, Defaults, SetClock, Conns
// and Metrics may be nil.
type Config struct {
	Logger  *zap.Logger
	Version string
	Auth    *surface.Auth // required: init sets the token
	Streams *stream.Registry
	Traffic *traffic.Counter
	// Resume owns the resume generation; nil reports generation 0 and
	// makes POST /v1/resume unsupported.
	Resume Resumer
	// Defaults are the process defaults that POST /v1/init changes.
	Defaults *proc.Defaults
	// SetClock sets the wall clock for /v1/init's time_unix_ns.
	SetClock func(time.Time) error
	// Conns reads the connection limiter's counters for /metrics.
	Conns func() surface.ConnStats
	// Metrics adds lines to /metrics (Prometheus text format).
	Metrics func(w *MetricsWriter)
	// Pause quiesces the sandbox before a pause (POST /v1/pause) and
	// calls a pause off (POST /v1/pause/abort); nil makes both
	// unsupported.
	Pause Pauser
	// Upgrade hands the sandbox to a new agent binary (POST /v1/upgrade);
	// nil makes it unsupported.
	Upgrade Upgrader
	// Isolation says, for /health, whether user work runs in its own
	// cgroup and what it uses; nil leaves it out.
	Isolation func() proc.Isolation
}

// API is the host API. Build with New, mount its Surface.
type API struct {
	cfg     Config
	log     *zap.Logger
	started time.Time

	// initMu makes each /v1/init whole: two first calls cannot both find
	// no token and both set one. initDone: an init succeeded, so the
	// open first call is used up.
	initMu   sync.Mutex
	initDone atomic.Bool
}

// New builds the host API.
func New(cfg Config) *API {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Traffic == nil {
		cfg.Traffic = traffic.NewCounter()
	}
	return &API{cfg: cfg, log: cfg.Logger, started: time.Now()}
}

// Surface is the host's routes. /health is open to anyone, the first
// /v1/init too while no token is set (the host's first call may set it);
// the rest take the token in the agent's own forms.
func (a *API) Surface() surface.Surface {
	route := func(pattern string, h http.HandlerFunc, access surface.Access) surface.Route {
		// Only /health is for pages too (envd's answers them).
		private := pattern != "GET /health"
		// What changes the sandbox's life; reading it stays on every
		// listener (a probe, the idle poll).
		hostOnly := strings.HasPrefix(pattern, "POST ")
		return surface.Route{Pattern: pattern, Handler: h, Access: access, Host: true, Private: private, HostOnly: hostOnly}
	}
	return surface.Surface{Name: "host", Tokens: surface.AgentTokens, Routes: []surface.Route{
		route("GET /health", a.handleHealth, surface.Public),
		route("POST /v1/init", a.handleInit, surface.Public),
		route("POST /v1/resume", a.handleResume, surface.Token),
		route("POST /v1/pause", a.handlePause, surface.Token),
		route("POST /v1/pause/abort", a.handlePauseAbort, surface.Token),
		route("POST /v1/upgrade", a.handleUpgrade, surface.Token),
		route("GET /v1/traffic", a.handleTraffic, surface.Token),
		route("GET /metrics", a.handleMetrics, surface.Token),
	}}
}

// Uptime is how long the agent has served this sandbox: since its start,
// or its first binary's start across upgrades (SetUptime).
func (a *API) Uptime() time.Duration { return time.Since(a.started) }

// SetUptime makes the agent's uptime d now: an upgrade's new binary goes
// on with its predecessor's, so a host that watches uptime_ms fall to
// tell a restart sees none. Call it before the API serves.
func (a *API) SetUptime(d time.Duration) { a.started = time.Now().Add(-d) }

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func containsAny(s, chars string) bool { return strings.ContainsAny(s, chars) }
