// Package agenttest serves the agent, built by package agent as the
// command builds it, with the surfaces a test mounts on it (each
// surface's Mount, as the command calls them), in a test's process on
// 127.0.0.1, and stops it at the test's cleanup. Only tests import it.
package agenttest

import (
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/agent"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/surface/surfacetest"
)

// Options change the agent.Config a test agent is built from. Every test
// agent has a state directory of its own, the process's one reaper, a
// clock it never sets (SetClock succeeds and does nothing), and no admin
// group unless the options name one.
type Options struct {
	// Config is the agent's configuration; Reaper and StateDir are
	// filled in when empty, and Version is "test".
	Config agent.Config
	// Listener, if set, wraps the test server's listener (small socket
	// buffers, say).
	Listener func(net.Listener) net.Listener
	// Mount mounts the surfaces the test serves (endpoint.Mount(a.Capabilities()), ...)
	// before the agent serves.
	Mount func(a *agent.Agent)
}

// Agent is a served test agent.
type Agent struct {
	*agent.Agent
	HTTP *httptest.Server
	// URL is the server's http:// address, WS the same as ws://.
	URL, WS string
}

// New builds the agent from o and serves it; at cleanup it shuts the
// server down (at most 10 s), then closes the agent.
func New(t testing.TB, o Options) *Agent {
	t.Helper()
	cfg := o.Config
	if cfg.Reaper == nil {
		cfg.Reaper = Reaper(t)
	}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	if cfg.Version == "" {
		cfg.Version = "test"
	}
	if cfg.SetClock == nil {
		cfg.SetClock = func(time.Time) error { return nil }
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if o.Mount != nil {
		o.Mount(a)
	}
	ta := &Agent{Agent: a}
	ta.HTTP = surfacetest.ServeWith(t, a.Server.Handler(), o.Listener, a.Server.Shutdown, a.Close)
	ta.URL, ta.WS = ta.HTTP.URL, "ws"+strings.TrimPrefix(ta.HTTP.URL, "http")
	return ta
}

var (
	reaperOnce sync.Once
	reaper     *proc.Reaper
	reaperErr  error
)

// Reaper is the process's one reaper: only one may run per process.
func Reaper(t testing.TB) *proc.Reaper {
	reaperOnce.Do(func() { reaper, reaperErr = proc.NewReaper() })
	if reaperErr != nil {
		t.Fatal(reaperErr)
	}
	return reaper
}
