package hostapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rayito/rayito-agent/internal/hostapi"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/surface/surfacetest"
)

// /v1/init's env is checked as every process's: names with '=' or NUL,
// values with NUL, and the agent's own RAYITO_ names are refused with a
// clear 400, and nothing is applied; the body is one JSON object.
func TestInitRefusesBadEnv(t *testing.T) {
	const token = "init-token"
	auth := surface.NewAuth(token)
	defaults := &proc.Defaults{}
	kit := surface.New(surface.Options{Auth: auth})
	kit.Mount(hostapi.New(hostapi.Config{Version: "v1", Auth: auth, Defaults: defaults}).Surface())
	srv := httptest.NewServer(kit.Handler())
	defer srv.Close()
	for body, want := range map[string]string{
		`{"env":{"RAYITO_URL":"ws://elsewhere"}}`: "agent's own configuration",
		`{"env":{"A=B":"x"}}`:                     "no '=' or NUL",
		`{"env":{"":"x"}}`:                        "empty name",
		`{"env":{"A":"x\u0000y"}}`:                "NUL byte",
		`null`:                                    "must be a JSON object",
		`{"env":{}} {}`:                           "data after the JSON object",
		`{"envs":{"A":"b"}}`:                      "unknown field",
	} {
		code, b := surfacetest.PostJSON(t, srv.URL+"/v1/init", token, body)
		if code != 400 || !strings.Contains(string(b), want) {
			t.Errorf("/v1/init %s: %d %s, want 400 %q", body, code, b, want)
		}
	}
	if r, err := defaults.Resolve(proc.Spec{Argv: []string{"true"}}); err != nil || strings.Contains(strings.Join(r.Env, " "), "RAYITO_URL") {
		t.Fatalf("a refused init changed the defaults: %v %v", r.Env, err)
	}
}

// Every host route answers a body over its 1 MiB bound with the status
// the error table gives its code (limit: 429), as the others do.
func TestHostBodyTooLargeIsLimit(t *testing.T) {
	const token = "big-token"
	auth := surface.NewAuth(token)
	kit := surface.New(surface.Options{Auth: auth})
	m, err := resume.New(resume.Options{})
	if err != nil {
		t.Fatal(err)
	}
	kit.Mount(hostapi.New(hostapi.Config{Version: "v1", Auth: auth, Defaults: &proc.Defaults{}, Resume: m, Pause: m}).Surface())
	srv := httptest.NewServer(kit.Handler())
	defer srv.Close()
	big := `{"resume_id": "` + strings.Repeat("x", 2<<20) + `"}`
	for _, route := range []string{"/v1/init", "/v1/resume", "/v1/pause", "/v1/pause/abort"} {
		code, b := surfacetest.PostJSON(t, srv.URL+route, token, big)
		if code != http.StatusTooManyRequests || !strings.Contains(string(b), `"limit"`) {
			t.Errorf("%s with a 2 MiB body: %d %s, want 429 limit", route, code, b)
		}
	}
}

// A sandbox_id with a control character, a NUL or a byte outside its
// alphabet is a clear 400 on /v1/resume and /v1/init, and nothing is
// kept: the hooks' environment carries the id, and one NUL in it once
// made every later hook fail to start.
func TestSandboxIDIsChecked(t *testing.T) {
	const token = "id-token"
	auth := surface.NewAuth(token)
	kit := surface.New(surface.Options{Auth: auth})
	m, err := resume.New(resume.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	kit.Mount(hostapi.New(hostapi.Config{Version: "v1", Auth: auth, Defaults: &proc.Defaults{}, Resume: m, Pause: m}).Surface())
	srv := httptest.NewServer(kit.Handler())
	defer srv.Close()
	for _, id := range []string{`sb\u0000x`, `sb\nx`, `sb x`, `sb/../x`, `sb\u00e9`, strings.Repeat("x", resume.MaxSandboxID+1)} {
		for _, route := range []string{"/v1/resume", "/v1/init"} {
			code, b := surfacetest.PostJSON(t, srv.URL+route, token, `{"sandbox_id": "`+id+`"}`)
			if code != 400 || !strings.Contains(string(b), "sandbox_id") || !strings.Contains(string(b), `"bad_request"`) {
				t.Errorf("%s with sandbox_id %q: %d %s, want 400 bad_request naming sandbox_id", route, id, code, b)
			}
		}
	}
	if st := m.State(); st.SandboxID != "" || st.Generation != 0 {
		t.Fatalf("a refused id changed the state: %+v", st)
	}
	code, b := surfacetest.PostJSON(t, srv.URL+"/v1/resume", token, `{"sandbox_id": "i-Sb_2.a:9"}`)
	if code != 200 || m.State().SandboxID != "i-Sb_2.a:9" {
		t.Fatalf("a good id: %d %s", code, b)
	}
}
