package hostapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rayito/rayito-agent/internal/hostapi"
	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/surface"
)

// TestUpgradeRequestErrors: the route's own refusals, each a 400 naming
// what is wrong (or 401 without the token), before the lifecycle hears of
// it. (cmd/rayito-agent's TestUpgradeRefusals drives the binary's.)
func TestUpgradeRequestErrors(t *testing.T) {
	const token = "upgrade-token"
	auth := surface.NewAuth(token)
	res, err := resume.New(resume.Options{})
	if err != nil {
		t.Fatal(err)
	}
	streams := stream.NewRegistry(0)
	defer streams.Close()
	kit := surface.New(surface.Options{Auth: auth})
	kit.Mount(hostapi.New(hostapi.Config{Version: "v1", Auth: auth, Streams: streams, Resume: res, Upgrade: res}).Surface())
	srv := httptest.NewServer(kit.Handler())
	defer srv.Close()
	sum := strings.Repeat("ab", 32)
	for _, c := range []struct {
		name, query, ctype, body, origin string
		token                            bool
		status                           int
		says                             string
	}{
		{"no token", "", "application/json", `{"path": "/bin/true"}`, "", false, 401, ""},
		{"a web page", "", "application/json", `{"path": "/bin/true"}`, "https://evil.example", true, 400, "no Origin header"},
		{"a form", "", "text/plain", `x`, "", true, 400, "application/octet-stream"},
		{"an unknown field", "", "application/json", `{"binary": "/bin/true"}`, "", true, 400, "binary"},
		{"no path", "", "application/json", `{}`, "", true, 400, "absolute path"},
		{"a bad sha256", "", "application/json", `{"path": "/bin/true", "sha256": "xyz"}`, "", true, 400, "64 hex digits"},
		{"a long upgrade_id", "", "application/json", `{"path": "/bin/true", "upgrade_id": "` + strings.Repeat("u", 300) + `"}`, "", true, 400, "upgrade_id longer"},
		{"a deadline too long", "", "application/json", `{"path": "/bin/true", "deadline_ms": 3600000}`, "", true, 400, "deadline_ms must be"},
		{"a body without its sha256", "", "application/octet-stream", "\x7fELF", "", true, 400, "sha256 in the query"},
		{"a deadline that is no number", "?sha256=" + sum + "&deadline_ms=soon", "application/octet-stream", "\x7fELF", "", true, 400, "deadline_ms must be a number"},
		{"a body received, to an agent that cannot upgrade", "?sha256=" + sum, "application/octet-stream", "#!/bin/sh\n", "", true, 400, "without a handover"},
	} {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/upgrade"+c.query, strings.NewReader(c.body))
		req.Header.Set("Content-Type", c.ctype)
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		if c.token {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error struct{ Code, Message string }
		}
		json.Unmarshal(b, &e)
		if resp.StatusCode != c.status || !strings.Contains(e.Error.Message, c.says) {
			t.Errorf("%s: HTTP %d %s, want %d saying %q", c.name, resp.StatusCode, b, c.status, c.says)
		}
	}
}
