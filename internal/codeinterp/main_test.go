package codeinterp_test

import (
	"bufio"
	"context"
	"encoding/json"
	agentpkg "github.com/rayito/rayito-agent/internal/agent"
	"github.com/rayito/rayito-agent/internal/agenttest"
	"github.com/rayito/rayito-agent/internal/endpoint"
	"github.com/rayito/rayito-agent/internal/envdapi"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/codeinterp"
	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/proc/proctest"
	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/traffic"
)

const (
	testToken = "codeinterp-test-token"
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
	url     string // http://127.0.0.1:port, no trailing slash
	kernels *jupyter.Manager
	streams *stream.Registry
	api     *codeinterp.Server
	traffic *traffic.Counter
	resumer *resume.Manager
	cuts    *surface.Cuts
	// beforeCut, if set, runs in a resume between the publication of
	// the new generation and the cut.
	beforeCut func()
}

func newAgent(t testing.TB) *agent {
	t.Helper()
	a := &agent{}
	// As make run serves it (--e2b-api): the SDK's control-plane calls.
	var api *codeinterp.Server
	ta := agenttest.New(t, agenttest.Options{Mount: func(ag *agentpkg.Agent) {
		endpoint.Mount(ag.Capabilities())
		envdapi.Mount(ag.Capabilities()) // the control plane, with E2BAPI
		api = codeinterp.Mount(ag.Capabilities())
	}, Config: agentpkg.Config{
		Token: testToken, Reaper: reaper, E2BAPI: true,
		CutHook: func() {
			if a.beforeCut != nil {
				a.beforeCut()
			}
		},
	}})
	a.url, a.api = ta.URL, api
	a.kernels, a.streams, a.traffic, a.resumer, a.cuts = ta.Kernels, ta.Streams, ta.Counter, ta.Resumer, ta.Cuts
	return a
}

// resume runs a resume sequence, as a host's POST /v1/resume does.
func (a *agent) resume(ctx context.Context) {
	a.resumer.Resume(ctx, resume.Report{Source: resume.SourceHost})
}

// do sends a request with the access token and returns the response and
// its body.
func (a *agent) do(t testing.TB, method, path, body string) (*http.Response, string) {
	t.Helper()
	return a.doAuth(t, method, path, body, "X-Access-Token", testToken)
}

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

// line is any /execute output line.
type line struct {
	Type           string          `json:"type"`
	Text           string          `json:"text"`
	IsMainResult   *bool           `json:"is_main_result"`
	Name           string          `json:"name"`
	Value          string          `json:"value"`
	Traceback      *string         `json:"traceback"`
	ExecutionCount int             `json:"execution_count"`
	Extra          json.RawMessage `json:"extra"`
}

// lines splits an NDJSON body, failing on anything that is not one JSON
// object per line.
func lines(t testing.TB, body string) []line {
	t.Helper()
	var out []line
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.Type == "" {
			t.Fatalf("line %q of %q: %v", sc.Text(), body, err)
		}
		out = append(out, l)
	}
	if !strings.HasSuffix(body, "\n") {
		t.Fatalf("body does not end with a newline: %q", body)
	}
	return out
}

// run posts to /execute and returns its lines.
func (a *agent) run(t testing.TB, body string) []line {
	t.Helper()
	res, out := a.do(t, "POST", "/execute", body)
	if res.StatusCode != 200 {
		t.Fatalf("execute %s: %d %s", body, res.StatusCode, out)
	}
	return lines(t, out)
}

// joinStdout joins consecutive stdout lines: the kernel may split one
// print into several messages, each a line.
func joinStdout(ls []line) []line {
	var out []line
	for _, l := range ls {
		if n := len(out); n > 0 && l.Type == "stdout" && out[n-1].Type == "stdout" {
			out[n-1].Text += l.Text
			continue
		}
		out = append(out, l)
	}
	return out
}

func types(ls []line) string {
	var ts []string
	for _, l := range ls {
		ts = append(ts, l.Type)
	}
	return strings.Join(ts, ",")
}
