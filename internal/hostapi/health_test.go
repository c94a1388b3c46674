package hostapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"testing"

	"github.com/rayito/rayito-agent/internal/hostapi"
	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/surface"
)

// /health without the token says what a host's probe needs and nothing
// more (any web page can read it); with the token, everything.
func TestHealthWithoutTheTokenIsAProbesOnly(t *testing.T) {
	const token = "health-token"
	auth := surface.NewAuth(token)
	res, err := resume.New(resume.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res.Resume(t.Context(), resume.Report{Source: resume.SourceHost, SandboxID: "sbx-secret"})
	streams := stream.NewRegistry(0)
	defer streams.Close()
	kit := surface.New(surface.Options{Auth: auth})
	kit.Mount(hostapi.New(hostapi.Config{Version: "v1", Auth: auth, Streams: streams, Resume: res}).Surface())
	srv := httptest.NewServer(kit.Handler())
	defer srv.Close()
	fields := func(header ...string) []string {
		req, _ := http.NewRequest("GET", srv.URL+"/health", nil)
		if len(header) == 2 {
			req.Header.Set(header[0], header[1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]json.RawMessage
		if resp.StatusCode != 200 || json.Unmarshal(b, &m) != nil {
			t.Fatalf("/health: %d %s", resp.StatusCode, b)
		}
		var names []string
		for k := range m {
			names = append(names, k)
		}
		sort.Strings(names)
		return names
	}
	public := []string{"instance", "kernel_state_lost", "resume_generation", "status", "version"}
	for _, h := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Origin", "https://evil.example"}} {
		if got := fields(h...); !slices.Equal(got, public) {
			t.Errorf("/health with %v: %v, want only %v", h, got, public)
		}
	}
	all := fields("Authorization", "Bearer "+token)
	for _, want := range []string{"sandbox_id", "kernels", "last_resume", "uptime_ms"} {
		if !slices.Contains(all, want) {
			t.Errorf("/health with the token lacks %s: %v", want, all)
		}
	}
}
