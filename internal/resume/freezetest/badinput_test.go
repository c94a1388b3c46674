package freezetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rayito/rayito-agent/client"
)

// wantHTTPError checks an HTTP error answer: the status and the protocol
// error code in its body.
func wantHTTPError(t *testing.T, what string, status int, body []byte, wantStatus int, wantCode client.Code) {
	t.Helper()
	var e struct {
		Error *client.Error `json:"error"`
	}
	if status != wantStatus {
		t.Errorf("%s: HTTP %d %s, want %d", what, status, body, wantStatus)
		return
	}
	if wantCode == "" {
		return
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == nil || e.Error.Code != wantCode {
		t.Errorf("%s: body %s, want an error with code %s", what, body, wantCode)
	}
}

// traffic reads /v1/traffic with the given token.
func traffic(t *testing.T, a *agent, token string) client.Traffic {
	t.Helper()
	status, body := a.request(t, "GET", "/v1/traffic", token, "")
	var tr client.Traffic
	if status != 200 || json.Unmarshal(body, &tr) != nil {
		t.Fatalf("traffic: HTTP %d %s", status, body)
	}
	return tr
}

// TestInitRefusesShortIdle: /v1/init refuses an idle policy below 60 s,
// negative or zero included, and changes nothing when it refuses.
func TestInitRefusesShortIdle(t *testing.T) {
	t.Parallel()
	a := startAgent(t, agentConfig{})
	status, body := a.request(t, "POST", "/v1/init", testToken, `{"idle_policy": {"max_idle_seconds": 120}}`)
	wantHTTPError(t, "valid init", status, body, 200, "")
	for _, bad := range []string{`-1`, `-3600`, `0`, `1`, `59`, `"90"`, `60.5`} {
		status, body := a.request(t, "POST", "/v1/init", testToken,
			fmt.Sprintf(`{"idle_policy": {"max_idle_seconds": %s}, "env": {"FROM_BAD_INIT": "1"}}`, bad))
		wantHTTPError(t, "max_idle_seconds "+bad, status, body, 400, client.CodeBadRequest)
	}
	for _, body := range []string{
		`{"idle_policy": {"max_idle_seconds": 30}} {"env": {"FROM_BAD_INIT": "1"}}`,
		`{"env": {"FROM_BAD_INIT": "1"}} xyz`,
	} {
		status, answer := a.request(t, "POST", "/v1/init", testToken, body)
		wantHTTPError(t, "init "+body, status, answer, 400, client.CodeBadRequest)
	}
	tr := traffic(t, a, testToken)
	if tr.IdlePolicy == nil || tr.IdlePolicy.MaxIdleSeconds != 120 {
		t.Fatalf("idle policy after refused inits: %+v, want 120 s", tr.IdlePolicy)
	}
	// The refused calls' env did not apply either.
	c := a.dial(t, client.Options{})
	p, err := c.Exec(ctxLong(t), client.ExecOptions{Argv: []string{"sh", "-c", "echo \"[$FROM_BAD_INIT]\""}})
	if err != nil {
		t.Fatal(err)
	}
	out := readAll(t, p.Stdout())
	if out != "[]\n" {
		t.Fatalf("env after inits: %q", out)
	}
}

// TestFlagRefusesShortIdle: the agent refuses to start with a bad
// --max-idle-seconds (or RAYITO_MAX_IDLE_SECONDS), saying why.
func TestFlagRefusesShortIdle(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		env  string
	}{
		{"negative", []string{"--max-idle-seconds", "-1"}, ""},
		{"too small", []string{"--max-idle-seconds", "59"}, ""},
		{"one", []string{"--max-idle-seconds=1"}, ""},
		{"not a number", []string{"--max-idle-seconds", "5m"}, ""},
		{"env too small", nil, "RAYITO_MAX_IDLE_SECONDS=30"},
		{"env negative", nil, "RAYITO_MAX_IDLE_SECONDS=-60"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			args := append([]string{"serve", "--listen", "127.0.0.1:0", "--state-dir", filepath.Join(t.TempDir(), "state"), "--detect-clock-jump=false"}, tc.args...)
			cmd := exec.CommandContext(ctx, agentBin, args...)
			cmd.Env = agentEnv(true)
			if tc.env != "" {
				cmd.Env = append(cmd.Env, tc.env)
			}
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if ctx.Err() != nil || !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("agent ran with %v %s: %v (want exit status 2)\n%s", tc.args, tc.env, err, out)
			}
			msg := string(out)
			if !strings.Contains(msg, "--max-idle-seconds") || !strings.Contains(msg, "60") {
				t.Fatalf("message does not name the flag and the minimum: %q", msg)
			}
		})
	}
}

// TestInitToken: the first /v1/init of an agent without a token sets one;
// every later call, and every route but /health, needs it.
func TestInitToken(t *testing.T) {
	t.Parallel()
	a := startAgent(t, agentConfig{NoToken: true})
	status, body := a.request(t, "POST", "/v1/init", "", `{"access_token": "first-token"}`)
	wantHTTPError(t, "first init", status, body, 200, "")

	status, body = a.request(t, "POST", "/v1/init", "", `{"access_token": "stolen"}`)
	wantHTTPError(t, "second init without the token", status, body, 401, client.CodeUnauthenticated)
	status, body = a.request(t, "POST", "/v1/init", "wrong", `{"access_token": "stolen"}`)
	wantHTTPError(t, "second init with a wrong token", status, body, 401, client.CodeUnauthenticated)
	status, body = a.request(t, "POST", "/v1/init", "", `{}`)
	wantHTTPError(t, "empty init without the token", status, body, 401, client.CodeUnauthenticated)
	status, body = a.request(t, "POST", "/v1/resume", "", ``)
	wantHTTPError(t, "resume without the token", status, body, 401, client.CodeUnauthenticated)
	if _, err := client.Dial(ctxLong(t), a.url, client.Options{Token: "stolen", DisableReconnect: true}); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("dial with the refused token: %v", err)
	}

	status, body = a.request(t, "POST", "/v1/init", "first-token", `{"access_token": "second-token"}`)
	wantHTTPError(t, "init with the token", status, body, 200, "")
	status, body = a.request(t, "POST", "/v1/init", "first-token", `{}`)
	wantHTTPError(t, "init with the replaced token", status, body, 401, client.CodeUnauthenticated)
	c := a.dial(t, client.Options{Token: "second-token"})
	if _, err := c.List(ctxLong(t), ""); err != nil {
		t.Fatal(err)
	}
	if h := a.health(t); h.ResumeGeneration != 0 {
		t.Fatalf("refused calls changed the generation: %+v", h)
	}
}

// TestResumeRefusesMalformedBodies: bad bodies are 400 bad_request and do
// not count as a resume.
func TestResumeRefusesMalformedBodies(t *testing.T) {
	t.Parallel()
	a := startAgent(t, agentConfig{})
	bad := map[string]string{
		"not json":             `resume please`,
		"truncated":            `{"resume_id": "r1"`,
		"array":                `[]`,
		"string":               `"r1"`,
		"unknown field":        `{"resume_id": "r1", "resumeId": "r1"}`,
		"id not a string":      `{"resume_id": 7}`,
		"time not a number":    `{"time_unix_ns": "1796000000000000000"}`,
		"time zero":            `{"time_unix_ns": 0}`,
		"time negative":        `{"time_unix_ns": -1}`,
		"time fractional":      `{"time_unix_ns": 1.5}`,
		"time overflows int64": `{"time_unix_ns": 99999999999999999999}`,
		"id too long":          `{"resume_id": "` + strings.Repeat("x", 300) + `"}`,
		"two objects":          `{"resume_id": "r1"} {"resume_id": "r2"}`,
		"trailing garbage":     `{"resume_id": "r1"} xyz`,
	}
	for name, body := range bad {
		status, answer := a.request(t, "POST", "/v1/resume", testToken, body)
		wantHTTPError(t, name, status, answer, 400, client.CodeBadRequest)
	}
	if h := a.health(t); h.ResumeGeneration != 0 || h.LastResume != nil {
		t.Fatalf("refused resumes counted: %+v", h)
	}
	// An empty body and an empty object are valid: all fields are optional.
	for i, body := range []string{``, `{}`} {
		status, answer := a.request(t, "POST", "/v1/resume", testToken, body)
		var h client.Health
		if status != 200 || json.Unmarshal(answer, &h) != nil || h.ResumeGeneration != uint64(i+1) {
			t.Fatalf("resume with body %q: HTTP %d %s, want generation %d", body, status, answer, i+1)
		}
	}
}
