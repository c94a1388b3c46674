package jupyterapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	agentpkg "github.com/rayito/rayito-agent/internal/agent"
	"github.com/rayito/rayito-agent/internal/agenttest"
	"github.com/rayito/rayito-agent/internal/endpoint"
	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/jupyterapi"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/proc/proctest"
	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/surface/surfacetest"
	"github.com/rayito/rayito-agent/internal/traffic"
)

const (
	testToken = "jupyter-test-token"
	// waitFor bounds anything a kernel does in a test.
	waitFor = 60 * time.Second
)

var reaper *proc.Reaper

func TestMain(m *testing.M) {
	os.Exit(proctest.Main(m, func(r *proc.Reaper) func() {
		reaper = r
		return nil
	}))
}

// agent is the agent's HTTP server with real managers and the API
// mounted, as the agent runs it, on 127.0.0.1:0.
type agent struct {
	url     string // http://127.0.0.1:port/
	kernels *jupyter.Manager
	streams *stream.Registry
	api     *jupyterapi.Server
	traffic *traffic.Counter
	kit     *surface.Server
	resumer *resume.Manager
	// beforeCut, if set, runs in a resume between the publication of
	// the new generation and the cut.
	beforeCut func()
}

func newAgent(t testing.TB, legacyOnly bool) *agent {
	t.Helper()
	a := &agent{}
	var mounted *jupyterapi.Server
	ta := agenttest.New(t, agenttest.Options{Mount: func(ag *agentpkg.Agent) {
		endpoint.Mount(ag.Capabilities())
		mounted = jupyterapi.Mount(ag.Capabilities())
	}, Config: agentpkg.Config{
		Token: testToken, Reaper: reaper,
		CutHook: func() {
			if a.beforeCut != nil {
				a.beforeCut()
			}
		},
	}})
	api := mounted
	if legacyOnly {
		// The legacy framing alone: a server of its own over the same
		// managers, mounted where the agent's would be.
		api = jupyterapi.New(jupyterapi.Options{Kernels: ta.Kernels, Traffic: ta.Counter, Cuts: ta.Cuts, LegacyOnly: true})
		kit := surface.New(surface.Options{Auth: ta.Auth, Traffic: ta.Counter})
		kit.Mount(api.Surface())
		hs := surfacetest.Serve(t, kit.Handler(), kit.Shutdown, func() {})
		a.url, a.kit = hs.URL+"/", kit
	} else {
		a.url, a.kit = ta.URL+"/", ta.Server
	}
	a.kernels, a.streams, a.traffic, a.resumer, a.api = ta.Kernels, ta.Streams, ta.Counter, ta.Resumer, api
	return a
}

// resume runs a resume sequence, as a host's POST /v1/resume does.
func (a *agent) resume(ctx context.Context) {
	a.resumer.Resume(ctx, resume.Report{Source: resume.SourceHost})
}

// stop shuts the agent's surfaces down, as at SIGTERM.
func (a *agent) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a.kit.Shutdown(ctx)
}

// startKernel starts a kernel through the manager, as any surface would.
func (a *agent) startKernel(t testing.TB) *jupyter.Kernel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	k, err := a.kernels.Start(ctx, jupyter.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.kernels.Shutdown(context.Background(), k.ID()) })
	return k
}

// do sends a REST request with the token header and returns the response
// and its body.
func (a *agent) do(t testing.TB, method, path, body string, header ...string) (*http.Response, string) {
	t.Helper()
	return a.doAuth(t, method, path, body, append([]string{"Authorization", "token " + testToken}, header...)...)
}

// doAuth sends a request with only the given headers.
func (a *agent) doAuth(t testing.TB, method, path, body string, header ...string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, a.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

// connections is the kernel model's connections, as a client reads it.
func (a *agent) connections(t testing.TB, kernelID string) int {
	t.Helper()
	res, body := a.do(t, "GET", "api/kernels/"+kernelID, "")
	var m struct{ Connections int }
	if res.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &m) != nil {
		t.Fatalf("GET api/kernels/%s: %d %s", kernelID, res.StatusCode, body)
	}
	return m.Connections
}
