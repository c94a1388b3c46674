package endpoint

import (
	"net/http/httptest"
	"testing"

	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/traffic"
)

// The test agent is the agent as the command builds it (package agent).
// That package imports this one, so only an external test file may call
// it: its init (agent_ext_test.go) sets BuildAgentForTests.

// AgentForTestsOptions are what the tests change of the agent.
type AgentForTestsOptions struct {
	Reaper  *proc.Reaper
	Counter *traffic.Counter
	Token   string
	Limits  stream.Limits
}

// AgentForTests is a served agent's parts the tests use.
type AgentForTests struct {
	Native   *Server
	Kit      *surface.Server
	Auth     *surface.Auth
	Surfaces []surface.Surface // the host's and the native, for their routes
	HTTP     *httptest.Server
	Streams  *stream.Registry
	Defaults *proc.Defaults
	Resume   *resume.Manager
}

// BuildAgentForTests builds and serves the agent until the test's cleanup.
var BuildAgentForTests func(t testing.TB, o AgentForTestsOptions) AgentForTests
