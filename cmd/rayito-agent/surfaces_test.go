package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
)

// TestSurfacesMounted: the agent serves jupyter_server's API and the
// code-interpreter API on its listener, and the code-interpreter API on
// the second listener when asked; all of them reach the same kernels.
func TestSurfacesMounted(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ciAddr := l.Addr().String()
	l.Close()
	base := "http" + strings.TrimPrefix(startAgent(t, "surface-token", "--code-interpreter-listen", ciAddr), "ws")
	second := "http://" + ciAddr

	do := func(method, url, body string, header ...string) (int, string) {
		t.Helper()
		return httpDo(t, method, url, body, header...)
	}
	jupyterAuth := []string{"Authorization", "token surface-token"}
	e2bAuth := []string{"X-Access-Token", "surface-token"}

	if code, body := do("GET", base+"/api/kernelspecs", "", jupyterAuth...); code != 200 || !strings.Contains(body, `"python3"`) {
		t.Fatalf("kernelspecs: %d %s", code, body)
	}
	if code, body := do("POST", second+"/execute", `{"code":"shared = 'both listeners'"}`, e2bAuth...); code != 200 || !strings.HasSuffix(body, "{\"type\":\"end_of_execution\"}\n") {
		t.Fatalf("execute on the second listener: %d %s", code, body)
	}
	if code, body := do("POST", base+"/execute", `{"code":"shared"}`, e2bAuth...); code != 200 || !strings.Contains(body, `"text":"both listeners"`) {
		t.Fatalf("execute on the main listener: %d %s", code, body)
	}
	if code, body := do("GET", base+"/api/kernels", "", jupyterAuth...); code != 200 || !strings.Contains(body, `"execution_state"`) {
		t.Fatalf("the default kernel is a Jupyter kernel too: %d %s", code, body)
	}
	// The second listener serves the code-interpreter API only.
	for _, path := range []string{"/api/kernels", "/health", "/v1/connect"} {
		if code, _ := do("GET", second+path, "", jupyterAuth...); code != 404 && code != 401 {
			t.Errorf("second listener serves %s: %d", path, code)
		}
	}
	if code, _ := do("GET", second+"/contexts", ""); code != 401 {
		t.Errorf("second listener without a token: %d", code)
	}
}

func TestParseCodeInterpreterListen(t *testing.T) {
	if c, err := parseServe(nil); err != nil || c.codeInterpListen != "" {
		t.Fatalf("off by default: %+v, %v", c, err)
	}
	t.Setenv("RAYITO_CODE_INTERPRETER_LISTEN", "127.0.0.1:49999")
	if c, err := parseServe(nil); err != nil || c.codeInterpListen != "127.0.0.1:49999" {
		t.Fatalf("from the environment: %+v, %v", c, err)
	}
	if c, err := parseServe([]string{"--code-interpreter-listen", ":50000"}); err != nil || c.codeInterpListen != ":50000" {
		t.Fatalf("the flag wins: %+v, %v", c, err)
	}
}

// TestResumeCutsSurfaces: POST /v1/resume on a real agent closes kernel
// websockets with 1012 and ends a running /execute with an error line
// that names the resume; afterwards a new websocket and a new /execute
// work at once, on kernels that kept their state.
func TestResumeCutsSurfaces(t *testing.T) {
	base := "http" + strings.TrimPrefix(startAgent(t, "resume-token"), "ws")
	do := func(method, path, body string, header ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	code, body := do("POST", "/api/kernels", `{"name":"python3"}`, "Authorization", "token resume-token")
	var k struct{ ID string }
	if err := json.Unmarshal([]byte(body), &k); err != nil || code != 201 {
		t.Fatalf("start kernel: %d %s", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/api/kernels/"+k.ID+"/channels?token=resume-token",
		&websocket.DialOptions{Subprotocols: []string{"v1.kernel.websocket.jupyter.org"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()

	if code, body := do("POST", "/execute", `{"code":"kept = 'set before the resume'","context_id":"`+k.ID+`"}`, "X-Access-Token", "resume-token"); code != 200 || !strings.Contains(body, "end_of_execution") {
		t.Fatalf("execute on the websocket's kernel: %d %s", code, body)
	}

	// A cell on the default context that waits until it is told to end.
	gate := filepath.Join(t.TempDir(), "gate")
	req, _ := http.NewRequest("POST", base+"/execute", strings.NewReader(`{"code":"import os, time\nstarted = 'before the resume'\nprint('running', flush=True)\nwhile not os.path.exists('`+gate+`'): time.sleep(0.02)"}`))
	req.Header.Set("X-Access-Token", "resume-token")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	defer os.WriteFile(gate, nil, 0o644)
	lines := bufio.NewScanner(res.Body)
	if !lines.Scan() || !strings.Contains(lines.Text(), "running") {
		t.Fatalf("first line %q", lines.Text())
	}

	if code, body := do("POST", "/v1/resume", `{}`, "Authorization", "Bearer resume-token", "Content-Type", "application/json"); code != 200 {
		t.Fatalf("resume: %d %s", code, body)
	}
	for {
		if _, _, err := ws.Read(ctx); err != nil {
			if websocket.CloseStatus(err) != 1012 {
				t.Fatalf("kernel websocket closed with %v, want 1012", err)
			}
			break
		}
	}
	var last string
	for lines.Scan() {
		if !strings.Contains(lines.Text(), "keepalive") {
			last = lines.Text()
		}
	}
	if !strings.Contains(last, `"name":"SandboxResumed"`) {
		t.Fatalf("the execute response ended with %q", last)
	}

	// A new websocket (legacy JSON frames: it offers no subprotocol) runs
	// a cell on the kernel as it was.
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws, _, err = websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/api/kernels/"+k.ID+"/channels?token=resume-token", nil)
	if err != nil {
		t.Fatalf("websocket after the resume: %v", err)
	}
	defer ws.CloseNow()
	if got := wsResult(ctx, t, ws, "kept"); got != "'set before the resume'" {
		t.Fatalf("kept through the websocket after the resume: %q", got)
	}
	// The cut cell kept running; once it ends, a new /execute runs after
	// it on the same kernel.
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := do("POST", "/execute", `{"code":"started"}`, "X-Access-Token", "resume-token"); code != 200 || !strings.Contains(body, `"text":"before the resume"`) {
		t.Fatalf("execute after the resume: %d %s", code, body)
	}
}

// wsResult runs code through a kernel websocket in the legacy framing and
// returns its execute_result's text/plain.
func wsResult(ctx context.Context, t *testing.T, ws *websocket.Conn, code string) string {
	t.Helper()
	const id = "surfaces-test-1"
	err := wsjson.Write(ctx, ws, map[string]any{
		"channel":       "shell",
		"header":        map[string]any{"msg_id": id, "msg_type": "execute_request", "session": "surfaces-test", "username": "test", "version": "5.3"},
		"parent_header": map[string]any{}, "metadata": map[string]any{},
		"content": map[string]any{"code": code, "silent": false, "store_history": true, "user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": true},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The result (iopub) and the reply (shell) come from two sockets in
	// either order; idle on iopub follows the result.
	result, replied, idle := "", false, false
	for !replied || !idle {
		var m struct {
			Header struct {
				MsgType string `json:"msg_type"`
			} `json:"header"`
			Parent struct {
				MsgID string `json:"msg_id"`
			} `json:"parent_header"`
			Content json.RawMessage `json:"content"`
		}
		if err := wsjson.Read(ctx, ws, &m); err != nil {
			t.Fatalf("reading the websocket: %v", err)
		}
		if m.Parent.MsgID != id {
			continue
		}
		switch m.Header.MsgType {
		case "execute_result":
			var c struct {
				Data map[string]string `json:"data"`
			}
			json.Unmarshal(m.Content, &c)
			result = c.Data["text/plain"]
		case "execute_reply":
			replied = true
		case "status":
			idle = strings.Contains(string(m.Content), `"idle"`)
		case "error":
			t.Fatalf("the cell failed: %s", m.Content)
		}
	}
	return result
}

// TestE2BAPIFlag: with --e2b-api the agent answers the e2b SDK's create
// with its own token; without, nothing answers there.
func TestE2BAPIFlag(t *testing.T) {
	for _, on := range []bool{true, false} {
		var flags []string
		if on {
			flags = append(flags, "--e2b-api")
		}
		a := startAgentProc(t, flags...)
		req, _ := http.NewRequest("POST", "http://"+a.addr+"/v2/sandboxes", strings.NewReader(`{"templateID":"base"}`))
		req.Header.Set("X-API-KEY", benchToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var sbx map[string]any
		json.NewDecoder(res.Body).Decode(&sbx)
		res.Body.Close()
		switch {
		case on && (res.StatusCode != http.StatusCreated || sbx["envdAccessToken"] != benchToken):
			t.Fatalf("--e2b-api: create answered %d %v", res.StatusCode, sbx)
		case !on && res.StatusCode != http.StatusNotFound:
			t.Fatalf("without --e2b-api: create answered %d %v", res.StatusCode, sbx)
		}
		a.stop()
	}
}

// httpDo sends one request with the given header pairs and returns the
// status and the body.
func httpDo(t *testing.T, method, url, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
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
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}
