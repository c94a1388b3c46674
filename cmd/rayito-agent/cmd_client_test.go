package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestServeHelper is not a test: it is the agent process the client
// command tests talk to (this test binary, started again with
// RAYITO_TEST_SERVE set). Its own process, so it reaps its own children
// and this process needs no reaper to wait for it.
func TestServeHelper(t *testing.T) {
	args := os.Getenv("RAYITO_TEST_SERVE")
	if args == "" {
		t.Skip("helper process for the client command tests")
	}
	os.Exit(serve(strings.Fields(args)))
}

// startAgent runs a real agent in a child process and returns its URL;
// extra are more serve flags.
func startAgent(t *testing.T, token string, extra ...string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeHelper$")
	cmd.Env = append(os.Environ(),
		"RAYITO_TEST_SERVE=--listen "+addr+" --state-dir "+t.TempDir()+" --log-level warn "+strings.Join(extra, " "),
		"RAYITO_ACCESS_TOKEN="+token)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/health")
		if err == nil {
			resp.Body.Close()
			return "ws://" + addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestExecCommand: output streams to ours, the exit code is the command's
// (128+n for signal n), stdin and env go through, and failures of the
// client itself exit 125.
func TestExecCommand(t *testing.T) {
	url := startAgent(t, "cli-token")
	t.Setenv("RAYITO_ACCESS_TOKEN", "cli-token")
	cases := []struct {
		name           string
		args           []string
		stdin          string
		code           int
		stdout, stderr string
	}{
		{"exit code", []string{"--", "sh", "-c", "echo out; echo err >&2; exit 3"}, "", 3, "out\n", "err\n"},
		{"signal", []string{"--", "sh", "-c", "kill -9 $$"}, "", 137, "", ""},
		{"stdin and env", []string{"--stdin", "--env", "A=b", "--cwd", "/tmp", "--", "sh", "-c", "cat; echo $A; pwd"}, "hello\n", 0, "hello\nb\n/tmp\n", ""},
		{"timeout", []string{"--timeout", "200ms", "--", "sleep", "30"}, "", 128 + 15, "", ""},
		{"bad cwd", []string{"--cwd", "/does/not/exist", "--", "true"}, "", exitClientError, "", "cwd"},
		{"no command", nil, "", 2, "", "usage"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"--url", url}, tc.args...)
			code := runExec(args, strings.NewReader(tc.stdin), &out, &errb)
			if code != tc.code || out.String() != tc.stdout || !strings.Contains(errb.String(), tc.stderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d, %q, stderr containing %q", code, out.String(), errb.String(), tc.code, tc.stdout, tc.stderr)
			}
		})
	}
	t.Setenv("RAYITO_ACCESS_TOKEN", "wrong")
	var errb bytes.Buffer
	if code := runExec([]string{"--url", url, "--", "true"}, nil, &bytes.Buffer{}, &errb); code != exitClientError || !strings.Contains(errb.String(), "401") {
		t.Fatalf("wrong token: exit %d, %q", code, errb.String())
	}
}

func TestHealthCommand(t *testing.T) {
	url := startAgent(t, "cli-token")
	var out, errb bytes.Buffer
	if code := runHealth([]string{"--url", url}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var h map[string]any
	if err := json.Unmarshal(out.Bytes(), &h); err != nil || h["status"] != "ok" {
		t.Fatalf("%s: %v", out.String(), err)
	}
	if _, ok := h["resume_generation"]; !ok {
		t.Fatalf("no resume_generation in %s", out.String())
	}
	if code := runHealth([]string{"--url", "ws://127.0.0.1:1"}, &out, &errb); code != 1 {
		t.Fatalf("health of nothing: exit %d", code)
	}
}
