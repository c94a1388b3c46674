package hostapi_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/internal/agent"
	"github.com/rayito/rayito-agent/internal/agenttest"
	"github.com/rayito/rayito-agent/internal/endpoint"
	"github.com/rayito/rayito-agent/internal/surface/surfacetest"
)

// The host API's tests against the agent as the command builds it.

const testToken = "host-test-token"

// newAgent serves the agent with token ("" for one without: the first
// /v1/init may set it).
func newAgent(t testing.TB, token string) *agenttest.Agent {
	return agenttest.New(t, agenttest.Options{Mount: func(a *agent.Agent) { endpoint.Mount(a.Capabilities()) }, Config: agent.Config{Token: token}})
}

// post sends a host's JSON request with token ("" for none) and decodes
// the answer.
func post(t *testing.T, a *agenttest.Agent, path, token, body string) (int, map[string]any) {
	t.Helper()
	return surfacetest.PostObject(t, a.URL+path, token, body)
}

// get reads path with the test token.
func get(t *testing.T, a *agenttest.Agent, path string) (int, []byte) {
	t.Helper()
	return surfacetest.Get(t, a.URL+path, testToken)
}

// run runs a shell command through the SDK with token and returns its
// stdout.
func run(t *testing.T, a *agenttest.Agent, token, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, a.WS, client.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"sh", "-c", cmd}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(p.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	return string(out)
}
