package endpoint_test

import (
	"testing"

	"github.com/rayito/rayito-agent/internal/agent"
	"github.com/rayito/rayito-agent/internal/agenttest"
	"github.com/rayito/rayito-agent/internal/endpoint"
	"github.com/rayito/rayito-agent/internal/surface"
)

func init() {
	endpoint.BuildAgentForTests = func(t testing.TB, o endpoint.AgentForTestsOptions) endpoint.AgentForTests {
		var native *endpoint.Server
		a := agenttest.New(t, agenttest.Options{Mount: func(a *agent.Agent) { native = endpoint.Mount(a.Capabilities()) }, Config: agent.Config{
			Token: o.Token, Retention: o.Limits, Counter: o.Counter, Reaper: o.Reaper,
		}})
		return endpoint.AgentForTests{
			Native: native, Kit: a.Server, Auth: a.Auth, HTTP: a.HTTP,
			Surfaces: []surface.Surface{a.Host.Surface(), native.Surface()},
			Streams:  a.Streams, Defaults: a.Defaults, Resume: a.Resumer,
		}
	}
}
