package jupyterapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/endpoint"
	"github.com/rayito/rayito-agent/internal/hostapi"
	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/jupyterapi"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/proc/proctest"
	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/surface"
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
	streams := stream.NewRegistry(0)
	kernels := jupyter.NewManager(jupyter.Options{Registry: streams, Reaper: reaper})
	counter := traffic.NewCounter()
	a := &agent{kernels: kernels, streams: streams, traffic: counter}
	cuts := surface.NewCuts(func() uint64 { return a.resumer.Generation() })
	resumer, err := resume.New(resume.Options{Sessions: sessionsFunc(func(ctx context.Context, gen uint64) {
		if a.beforeCut != nil {
			a.beforeCut()
		}
		cuts.CutForResume(ctx, gen)
	}), SetClock: func(time.Time) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	a.resumer = resumer
	api := jupyterapi.New(jupyterapi.Options{Kernels: kernels, Traffic: counter, Cuts: cuts, LegacyOnly: legacyOnly})
	auth := surface.NewAuth(testToken)
	kit := surface.New(surface.Options{Auth: auth, Traffic: counter})
	kit.Mount(hostapi.New(hostapi.Config{Auth: auth, Streams: streams, Traffic: counter}).Surface())
	kit.Mount(endpoint.New(endpoint.Config{Streams: streams, Traffic: counter, Kernels: kernels, Cuts: cuts}).Surface())
	kit.Mount(api.Surface())
	hs := httptest.NewServer(kit.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		kit.Shutdown(ctx)
		hs.Close()
		kernels.Close()
		streams.Close()
	})
	a.url, a.api, a.kit = hs.URL+"/", api, kit
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

// sessionsFunc adapts a function to resume.Sessions.
type sessionsFunc func(ctx context.Context, gen uint64)

func (f sessionsFunc) CutForResume(ctx context.Context, gen uint64) { f(ctx, gen) }

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
