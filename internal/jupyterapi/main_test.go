package jupyterapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/endpoint"
	"github.com/rayito/rayito-agent/internal/hostapi"
	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/jupyterapi"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/proc/proctest"
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
	api     *jupyterapi.Server
	traffic *traffic.Counter
	kit     *surface.Server
	cuts    *surface.Cuts
	gen     *atomic.Uint64
}

func newAgent(t testing.TB, legacyOnly bool) *agent {
	t.Helper()
	streams := stream.NewRegistry(0)
	kernels := jupyter.NewManager(jupyter.Options{Registry: streams, Reaper: reaper})
	counter := traffic.NewCounter()
	gen := new(atomic.Uint64)
	cuts := surface.NewCuts(gen.Load)
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
	return &agent{url: hs.URL + "/", kernels: kernels, api: api, traffic: counter, kit: kit, cuts: cuts, gen: gen}
}

// resume is a resume's cut as the agent makes it: the new generation is
// published, then what started before it is cut.
func (a *agent) resume(ctx context.Context) {
	a.cuts.CutForResume(ctx, a.gen.Add(1))
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
