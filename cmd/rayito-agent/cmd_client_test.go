package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	return startAgentWith(t, token, agentOptions{flags: strings.Join(extra, " ")}).url
}

// agentOptions vary how startAgentWith runs the agent.
type agentOptions struct {
	prefix []string   // runs the agent's command line (a shell that lowers a limit first)
	stderr io.Writer  // the agent's log; nil: ours
	flags  string     // more serve flags
	files  []*os.File // descriptors the agent inherits as 3, 4...
}

// testAgent is a running agent, started by startAgentWith.
type testAgent struct {
	url  string
	stop func() // stops it and waits for it; also at cleanup
}

// startAgentWith runs a real agent in a child process.
func startAgentWith(t *testing.T, token string, o agentOptions) testAgent {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	argv := append(append([]string{}, o.prefix...), os.Args[0], "-test.run=^TestServeHelper$")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(),
		"RAYITO_TEST_SERVE=--listen "+addr+" --state-dir "+t.TempDir()+" --log-level warn "+o.flags,
		"RAYITO_ACCESS_TOKEN="+token)
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = o.files
	if o.stderr != nil {
		cmd.Stderr = o.stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cmd.Process.Signal(os.Interrupt)
			// An agent that does not stop (it ignores SIGINT: a bug a
			// test is looking for) must not hang the tests.
			kill := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
			cmd.Wait()
			kill.Stop()
		})
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/health")
		if err == nil {
			resp.Body.Close()
			return testAgent{url: "ws://" + addr, stop: stop}
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

// TestCommandsInheritNoDescriptors: a descriptor the agent was started
// with (a pipe, as fd 3) is not handed on to the commands it runs.
func TestCommandsInheritNoDescriptors(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	a := startAgentWith(t, "cli-token", agentOptions{files: []*os.File{pw}})
	pw.Close()
	t.Setenv("RAYITO_ACCESS_TOKEN", "cli-token")
	var out, errb bytes.Buffer
	if code := runExec([]string{"--url", a.url, "--", "sh", "-c", "ls /proc/$$/fd"}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if got := strings.Fields(out.String()); !slices.Equal(got, []string{"0", "1", "2"}) {
		t.Fatalf("a command's descriptors: %q, want only 0, 1 and 2", got)
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

// TestExecDetach: exec --detach prints the command's stream and pid and
// returns while the command runs; attach then follows it to its end,
// with all its output. -h says what Ctrl-C and a closed terminal do.
func TestExecDetach(t *testing.T) {
	url := startAgent(t, "cli-token")
	t.Setenv("RAYITO_ACCESS_TOKEN", "cli-token")
	gate := filepath.Join(t.TempDir(), "gate")
	var out, errb bytes.Buffer
	code := runExec([]string{"--url", url, "--detach", "--tag", "bg", "--", "sh", "-c", "echo started; while [ ! -e " + gate + " ]; do sleep 0.05; done; echo done; exit 4"}, nil, &out, &errb)
	var stream, pid int
	var tag string
	if n, _ := fmt.Sscanf(out.String(), "stream %d pid %d tag %s\n", &stream, &pid, &tag); code != 0 || n != 3 || tag != "bg" || !strings.Contains(errb.String(), "rayito-agent attach --tag bg") {
		t.Fatalf("exec --detach: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the detached command (pid %d) is not running: %v", pid, err)
	}
	os.WriteFile(gate, nil, 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out.Reset()
	errb.Reset()
	if code := runAttach(ctx, []string{"--url", url, strconv.Itoa(stream)}, &out, &errb); code != 4 || out.String() != "started\ndone\n" {
		t.Fatalf("attach to the detached command: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	errb.Reset()
	if code := runExec([]string{"--url", url, "--detach", "--stdin", "--", "cat"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--detach and --stdin") {
		t.Fatalf("--detach --stdin: exit %d, %q", code, errb.String())
	}
	for _, cmd := range []string{"exec", "attach"} {
		errb.Reset()
		c, _ := findCommand(cmd)
		commandFlags(cmd, &errb).Usage()
		if !strings.Contains(errb.String(), "Ctrl-C") || !strings.Contains(errb.String(), "closed terminal") || c.notes == "" {
			t.Fatalf("%s -h does not say what Ctrl-C and a closed terminal do:\n%s", cmd, errb.String())
		}
	}
}
