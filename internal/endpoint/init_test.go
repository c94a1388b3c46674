package endpoint

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/hostapi"
)

// TestOnlyFirstInitIsOpen: without a token, the first /v1/init needs
// none; every later one does, whether or not the first set a token, so
// nobody can inject environment into later processes.
func TestOnlyFirstInitIsOpen(t *testing.T) {
	t.Parallel()
	a := newTestAgentWithToken(t, "")
	// A refused first call (bad body) does not use the open call up.
	if status, _ := a.post(t, "/v1/init", "", `{"default_cwd": "/no/such/dir"}`); status != http.StatusBadRequest {
		t.Fatalf("bad first init: %d", status)
	}
	if status, _ := a.post(t, "/v1/init", "", `{"default_cwd": "/tmp"}`); status != http.StatusOK {
		t.Fatalf("first init: %d", status)
	}
	status, m := a.post(t, "/v1/init", "", `{"env": {"INJECTED": "yes"}}`)
	if status != http.StatusUnauthorized || m["error"] == nil {
		t.Fatalf("second init without a token after a first that set none: %d %v", status, m)
	}
	a.auth.Set(testToken)
	rc := a.dial(t)
	id := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"sh", "-c", "echo ${INJECTED-none}; pwd"}}))
	if out, _ := rc.collect(id); string(out["stdout"]) != "none\n/tmp\n" {
		t.Fatalf("after a refused second init a process sees %q, want the first init's cwd only", out["stdout"])
	}
}

// TestSlowInitBodyBlocksNobody: a caller that sends its init body slowly
// holds only its own request: the host's init goes through meanwhile,
// and the slow one is cut off at its body deadline without effect.
func TestSlowInitBodyBlocksNobody(t *testing.T) {
	t.Parallel()
	a := newTestAgentWithToken(t, "")
	// The agent's handler, behind a door that says when an init started
	// reading its body: past its token check, which the host's init
	// would otherwise make fail (and then net/http, not the agent, would
	// wait for the rest of the body: the agent's own server drops such
	// connections, this test server does not).
	entered := make(chan struct{}, 2)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/init" {
			r.Body = &firstRead{ReadCloser: r.Body, done: entered}
		}
		a.kit.Handler().ServeHTTP(w, r)
	}))
	defer hs.Close()
	a.http = hs
	slow, err := net.Dial("tcp", strings.TrimPrefix(a.http.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := slow.Write([]byte("POST /v1/init HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")); err != nil {
		t.Fatal(err)
	}
	<-entered // the slow request is reading its body

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", a.http.URL+"/v1/init", strings.NewReader(`{"access_token": "host-token"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the host's init waited for the slow caller: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("host's init: %d", resp.StatusCode)
	}
	slow.SetReadDeadline(time.Now().Add(hostapi.BodyTimeout + 20*time.Second))
	sr, err := http.ReadResponse(bufio.NewReader(slow), nil)
	if err != nil {
		t.Fatalf("the slow request got no answer: %v", err)
	}
	sr.Body.Close()
	if sr.StatusCode != http.StatusBadRequest {
		t.Fatalf("slow init: %d, want 400 (body deadline)", sr.StatusCode)
	}
	if status, _ := a.post(t, "/v1/init", "host-token", `{}`); status != http.StatusOK {
		t.Fatalf("the host's token did not stay: %d", status)
	}
}

// TestHostBodiesMustBeObjects: a body that is JSON but not an object is
// refused (null is not "nothing"), and messages speak JSON, not Go.
func TestHostBodiesMustBeObjects(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	for _, path := range []string{"/v1/init", "/v1/resume"} {
		for body, want := range map[string]string{
			`[]`:                       "must be a JSON object",
			`null`:                     "must be a JSON object",
			`"x"`:                      "must be a JSON object",
			`7`:                        "must be a JSON object",
			`{"nope": 1}`:              `unknown field "nope"`,
			`{"time_unix_ns": "soon"}`: "time_unix_ns must be a whole number, not a string",
		} {
			status, m := a.post(t, path, testToken, body)
			e, _ := m["error"].(map[string]any)
			msg, _ := e["message"].(string)
			if status != http.StatusBadRequest || e["code"] != "bad_request" || !strings.Contains(msg, want) {
				t.Errorf("%s %s: %d %v, want 400 saying %q", path, body, status, m, want)
			}
			if strings.Contains(msg, "Go ") || strings.Contains(msg, "struct") || strings.Contains(msg, "int64") {
				t.Errorf("%s %s: message shows Go names: %s", path, body, msg)
			}
		}
	}
	status, m := a.post(t, "/v1/init", testToken, `{"env": 5}`)
	if e, _ := m["error"].(map[string]any); status != 400 || e["message"] != "malformed body: env must be an object, not a number" {
		t.Fatalf("env of the wrong type: %d %v", status, m)
	}
}

// firstRead sends on done when its first Read starts.
type firstRead struct {
	io.ReadCloser
	done chan<- struct{}
	once sync.Once
}

func (f *firstRead) Read(p []byte) (int, error) {
	f.once.Do(func() { f.done <- struct{}{} })
	return f.ReadCloser.Read(p)
}
