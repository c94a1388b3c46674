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
		a := agenttest.New(t, agenttest.Options{Config: agent.Config{
			Token: o.Token, Retention: o.Limits, Counter: o.Counter, Reaper: o.Reaper,
		}})
		return endpoint.AgentForTests{
			Native: a.Native, Kit: a.Server, Auth: a.Auth, HTTP: a.HTTP,
			Surfaces: []surface.Surface{a.Host.Surface(), a.Native.Surface()},
			Streams:  a.Streams, Defaults: a.Defaults, Resume: a.Resumer,
		}
	}
}
