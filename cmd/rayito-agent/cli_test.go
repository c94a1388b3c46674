package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// TestMainHelper is not a test: it is rayito-agent's main for the tests
// that run the command line as a person does (this test binary, started
// again with RAYITO_TEST_MAIN holding the arguments, one per line).
func TestMainHelper(t *testing.T) {
	args, ok := os.LookupEnv("RAYITO_TEST_MAIN")
	if !ok {
		t.Skip("helper process for the command line tests")
	}
	var argv []string
	if args != "" {
		argv = strings.Split(args, "\n")
	}
	os.Exit(dispatch(argv, os.Stdout, os.Stderr))
}

// rayitoAgent runs `rayito-agent args...` and returns its exit code,
// stdout and stderr.
func rayitoAgent(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMainHelper$")
	cmd.Env = append(append(os.Environ(), "RAYITO_TEST_MAIN="+strings.Join(args, "\n")), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// TestHelpAndVersion: -h lists every subcommand with its line; every
// subcommand's -h has the same form; --version prints the version.
func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		code, out, _ := rayitoAgent(t, nil, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d", args, code)
		}
		for _, c := range commands() {
			if !strings.Contains(out, "  "+c.name+" ") || !strings.Contains(out, c.summary) {
				t.Errorf("%v does not list %s with its summary:\n%s", args, c.name, out)
			}
		}
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		if code, out, _ := rayitoAgent(t, nil, args...); code != 0 || strings.TrimSpace(out) != version {
			t.Errorf("%v: exit %d, %q; want %q", args, code, out, version)
		}
	}
	for _, c := range commands() {
		code, _, errOut := rayitoAgent(t, nil, c.name, "-h")
		lines := strings.Split(errOut, "\n")
		if code != 0 || len(lines) < 3 || lines[0] != strings.TrimSpace("usage: rayito-agent "+c.name+" "+c.args) ||
			lines[1] != "" || lines[2] != upperFirst(c.summary)+"." {
			t.Errorf("%s -h: exit %d, output:\n%s", c.name, code, errOut)
		}
		if c.name != "version" && c.name != "handover-check" && !strings.Contains(errOut, "\nflags:\n") {
			t.Errorf("%s -h lists no flags:\n%s", c.name, errOut)
		}
		if c.name == "exec" {
			if alt, _, altOut := rayitoAgent(t, nil, "help", c.name); alt != 0 || altOut != errOut {
				t.Errorf("help %s differs from %s -h", c.name, c.name)
			}
		}
	}
	if code, _, errOut := rayitoAgent(t, nil, "frobnicate"); code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) || !strings.Contains(errOut, "commands:") {
		t.Errorf("unknown command: exit %d, %q", code, errOut)
	}
}

// TestBusyPort: a port in use stops the agent with one plain line that
// names the address and how to pick another (make's LISTEN under make),
// and exit code 1.
func TestBusyPort(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	for makelevel, hint := range map[string]string{"": "--listen or RAYITO_LISTEN", "1": "make run LISTEN=127.0.0.1:PORT"} {
		code, _, errOut := rayitoAgent(t, []string{"RAYITO_ACCESS_TOKEN=x", "MAKELEVEL=" + makelevel}, "serve", "--listen", addr, "--state-dir", t.TempDir())
		want := "rayito-agent: " + addr + " is already in use"
		if code != 1 || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, want) || !strings.Contains(errOut, hint) {
			t.Fatalf("MAKELEVEL=%q: exit %d, stderr %q; want exit 1 and one line starting %q naming %q", makelevel, code, errOut, want, hint)
		}
	}
}

// syncBuffer is a bytes.Buffer a child process writes while a test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStartedWithSignalsIgnored: an agent started with SIGINT and SIGHUP
// ignored (as `agent &` or nohup start it) does not pass that on to the
// programs it runs, and so does not warn that it would.
func TestStartedWithSignalsIgnored(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	a := startAgentWith(t, "sig-token", agentOptions{prefix: []string{"sh", "-c", `trap "" INT HUP; exec "$0" "$@"`}, stderr: &logs})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, a.url, client.Options{Token: "sig-token"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out bytes.Buffer
	p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"sh", "-c", "grep SigIgn /proc/self/status"}, OnStdout: func(b []byte) { out.Write(b) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	hex := strings.TrimSpace(strings.TrimPrefix(out.String(), "SigIgn:"))
	mask, err := strconv.ParseUint(hex, 16, 64)
	if err != nil {
		t.Fatalf("SigIgn %q: %v", out.String(), err)
	}
	if mask&(1<<0|1<<1) != 0 { // bit n-1 is signal n: SIGHUP 1, SIGINT 2
		t.Fatalf("a command of the agent ignores SIGHUP or SIGINT (SigIgn %s)", hex)
	}
	c.Close()
	a.stop()
	if strings.Contains(logs.String(), "ignores a signal") {
		t.Fatalf("the agent warned about a signal it does not pass on:\n%s", logs.String())
	}
}

// TestClockPolicy: the agent sets the wall clock where that is its job
// (a sandbox VM image, or --set-clock=true) and nowhere else.
func TestClockPolicy(t *testing.T) {
	t.Parallel()
	marker := t.TempDir() + "/rayito-image"
	for _, c := range []struct {
		mode   string
		marker bool
		set    bool
	}{
		{"auto", false, false}, {"auto", true, true}, {"true", false, true}, {"false", true, false},
	} {
		os.Remove(marker)
		if c.marker {
			os.WriteFile(marker, nil, 0o644)
		}
		if set, why := clockPolicy(c.mode, marker); set != c.set || why == "" {
			t.Errorf("--set-clock=%s with marker %v: set %v (%s), want %v", c.mode, c.marker, set, why, c.set)
		}
	}
	called := false
	setter := clockSetter(false, func(time.Time) error { called = true; return nil })
	if err := setter(time.Now()); !errors.Is(err, errClockNotSet) || called {
		t.Fatalf("a refused setter: %v, called %v", err, called)
	}
	if _, err := parseServe([]string{"--set-clock", "maybe"}); err == nil || !strings.Contains(err.Error(), "set-clock") {
		t.Fatalf("--set-clock maybe: %v", err)
	}
}

// TestInitCommand: init configures an agent started without a token (the
// first call is open and sets one); later calls need the token, and the
// error says where the command took it from.
func TestInitCommand(t *testing.T) {
	url := startAgent(t, "")
	t.Setenv("RAYITO_ACCESS_TOKEN", "")
	var out, errb bytes.Buffer
	if code := runInit([]string{"--url", url, "--set-token", "fresh", "--env", "GREETING=hola", "--max-idle-seconds", "120"}, &out, &errb); code != 0 {
		t.Fatalf("first init: exit %d, %s", code, errb.String())
	}
	var h map[string]any
	if err := json.Unmarshal(out.Bytes(), &h); err != nil || h["status"] != "ok" {
		t.Fatalf("init printed %q: %v", out.String(), err)
	}
	errb.Reset()
	if code := runInit([]string{"--url", url, "--env", "X=y"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "401") || !strings.Contains(errb.String(), "RAYITO_ACCESS_TOKEN is not set") {
		t.Fatalf("second init without a token: exit %d, %q", code, errb.String())
	}
	t.Setenv("RAYITO_ACCESS_TOKEN", "stale")
	errb.Reset()
	if code := runExec([]string{"--url", url, "--", "true"}, nil, &out, &errb); code != exitClientError || !strings.Contains(errb.String(), "refused the token in RAYITO_ACCESS_TOKEN") {
		t.Fatalf("exec with a wrong token: exit %d, %q", code, errb.String())
	}
	t.Setenv("RAYITO_ACCESS_TOKEN", "fresh")
	out.Reset()
	if code := runExec([]string{"--url", url, "--", "sh", "-c", "echo $GREETING"}, nil, &out, &errb); code != 0 || out.String() != "hola\n" {
		t.Fatalf("exec after init: exit %d, %q, %s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := runInit([]string{"--url", url, "--max-idle-seconds", "30"}, &out, &errb); code != 1 {
		t.Fatalf("init with a bad idle policy: exit %d", code)
	}
}

// TestResumeCommandResetsIdle: right after a resume the agent's traffic
// reports it busy, whatever the quiet before: the host must not suspend
// a VM it just woke.
func TestResumeCommandResetsIdle(t *testing.T) {
	url := startAgent(t, "idle-token")
	t.Setenv("RAYITO_ACCESS_TOKEN", "idle-token")
	idleMs := func() int64 {
		req, _ := http.NewRequest("GET", strings.Replace(url, "ws://", "http://", 1)+"/v1/traffic", nil)
		req.Header.Set("Authorization", "Bearer idle-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var tr client.Traffic
		json.NewDecoder(resp.Body).Decode(&tr)
		return tr.IdleMs
	}
	var before int64
	for before < 500 {
		time.Sleep(100 * time.Millisecond)
		before = idleMs()
	}
	var out, errb bytes.Buffer
	if code := runResume([]string{"--url", url, "--id", "r1"}, &out, &errb); code != 0 {
		t.Fatalf("resume: exit %d, %s", code, errb.String())
	}
	if after := idleMs(); after >= before {
		t.Fatalf("idle_ms %d after the resume, %d before: the resume did not reset the idle clock", after, before)
	}
}
