package agent_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/rayito/rayito-agent/internal/agent"
	"github.com/rayito/rayito-agent/internal/agenttest"
	"github.com/rayito/rayito-agent/internal/codeinterp"
	"github.com/rayito/rayito-agent/internal/endpoint"
	"github.com/rayito/rayito-agent/internal/envdapi"
	"github.com/rayito/rayito-agent/internal/jupyterapi"
)

func TestNewNeedsAReaper(t *testing.T) {
	if _, err := agent.New(agent.Config{StateDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "reaper") {
		t.Fatalf("New without a reaper: %v", err)
	}
}

// Every surface is mounted, behind the one token: the host's, the
// native, envd's, jupyter_server's and the code interpreter's routes
// answer.
func TestEverySurfaceIsServed(t *testing.T) {
	a := agenttest.New(t, agenttest.Options{Mount: func(a *agent.Agent) {
		endpoint.Mount(a.Capabilities())
		envdapi.Mount(a.Capabilities())
		jupyterapi.Mount(a.Capabilities())
		codeinterp.Mount(a.Capabilities())
	}, Config: agent.Config{Token: "tok"}})
	for _, tc := range []struct {
		path   string
		header string
		want   int
	}{
		{"/health", "", 200},
		{"/v1/traffic", "Bearer tok", 200},
		{"/v1/traffic", "", 401},
		{"/api/kernelspecs", "token tok", 200},
		{"/api/kernelspecs", "", 403},
		{"/files?path=/etc/hostname", "", 401},
		{"/contexts", "Bearer tok", 200},
	} {
		req, _ := http.NewRequest("GET", a.URL+tc.path, nil)
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s with %q: %d, want %d", tc.path, tc.header, resp.StatusCode, tc.want)
		}
	}
}
