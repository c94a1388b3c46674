package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestHostListen: with --host-listen the routes that change the sandbox's
// life (init, pause, resume, upgrade) are served on the host listener
// alone, 404 on the sandbox-facing one, whatever token a caller holds;
// reading (/health) stays on both, and the host listener serves nothing
// else (no websocket). The same address for both is refused at start.
func TestHostListen(t *testing.T) {
	a := startAgentProc(t, "--host-listen", "127.0.0.1:0")
	var host string
	deadline := time.Now().Add(10 * time.Second)
	for host == "" && time.Now().Before(deadline) {
		a.mu.Lock()
		for _, l := range a.log {
			var line struct {
				Msg    string `json:"msg"`
				Listen string `json:"listen"`
			}
			if json.Unmarshal([]byte(l), &line) == nil && line.Msg == "serving the host's routes" {
				host = line.Listen
			}
		}
		a.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	if host == "" {
		t.Fatal("the agent did not say where it serves the host's routes")
	}
	call := func(method, addr, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+benchToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		method, path string
		sandbox      int // on the sandbox-facing listener
		onHost       int
	}{
		{"GET", "/health", 200, 200},
		{"GET", "/v1/traffic", 200, 200},
		{"POST", "/v1/pause/abort", 404, 409}, // no pause in place
		{"POST", "/v1/upgrade", 404, 400},     // no binary named
		{"POST", "/v1/init", 404, 200},
		{"POST", "/v1/resume", 404, 200},
		{"GET", "/v1/connect", 426, 404}, // not a websocket upgrade here; no such route there
	} {
		if got, body := call(c.method, a.addr, c.path); got != c.sandbox {
			t.Errorf("%s %s on the sandbox's listener: %d %s, want %d", c.method, c.path, got, body, c.sandbox)
		} else if got == 404 && !strings.Contains(body, "--host-listen") {
			t.Errorf("%s %s on the sandbox's listener: %s; the 404 should say where the route is", c.method, c.path, body)
		}
		if got, body := call(c.method, host, c.path); got != c.onHost {
			t.Errorf("%s %s on the host listener: %d %s, want %d", c.method, c.path, got, body, c.onHost)
		}
	}
	code, _, errOut := rayitoAgent(t, nil, "serve", "--listen", "127.0.0.1:49977", "--host-listen", "127.0.0.1:49977")
	if code != 2 || !strings.Contains(errOut, "a listener of their own") {
		t.Errorf("the same address for both: exit %d, %s", code, errOut)
	}
}
