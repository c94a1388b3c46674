package freezetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

const testToken = "freezetest-token"

// waitLong bounds every wait for something that should happen soon; the
// machine may be a busy 2-core one, so it is generous.
const waitLong = 60 * time.Second

// agentConfig says how to start an agent process.
type agentConfig struct {
	StateDir string   // "" for a fresh one
	NoToken  bool     // start without RAYITO_ACCESS_TOKEN
	Args     []string // more serve flags
	Freezer  string   // freezerCgroup or freezerSignal; "" for newFreezer's choice
}

// agent is a real agent binary running in a process of its own.
type agent struct {
	t        testing.TB
	addr     string // host:port
	url      string // ws://host:port
	stateDir string
	logPath  string
	cmd      *exec.Cmd
	exited   chan struct{} // closed once cmd.Wait returned
	fr       freezer
	frozen   bool
	stopOnce sync.Once
	tmpDir   string // the agent's TMPDIR
}

// startAgent starts an agent and waits until /health answers. Cleanup
// stops it and kills whatever of its tree is left.
func startAgent(t testing.TB, cfg agentConfig) *agent {
	t.Helper()
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(t.TempDir(), "state")
	}
	// Another parallel test may take the free port first: retry then.
	var lastErr error
	for range 3 {
		a, err := tryStartAgent(t, cfg)
		if err == nil {
			return a
		}
		lastErr = err
	}
	t.Fatalf("starting the agent: %v", lastErr)
	return nil
}

func tryStartAgent(t testing.TB, cfg agentConfig) (*agent, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	logf, err := os.CreateTemp(t.TempDir(), "agent-*.log")
	if err != nil {
		return nil, err
	}
	a := &agent{t: t, addr: addr, url: "ws://" + addr, stateDir: cfg.StateDir, logPath: logf.Name(), exited: make(chan struct{}), fr: freezerOf(t, cfg.Freezer)}
	args := append([]string{"serve", "--listen", addr, "--state-dir", cfg.StateDir, "--detect-clock-jump=false"}, cfg.Args...)
	a.cmd = exec.Command(agentBin, args...)
	// What the agent and its programs put in the temporary directory
	// goes where the test cleans up.
	a.tmpDir = t.TempDir()
	a.cmd.Env = append(agentEnv(!cfg.NoToken), "TMPDIR="+a.tmpDir)
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	if err := a.fr.prepare(a.cmd); err != nil {
		logf.Close()
		a.fr.close()
		return nil, err
	}
	if err := a.cmd.Start(); err != nil {
		logf.Close()
		a.fr.close()
		return nil, err
	}
	logf.Close()
	a.fr.started(a.cmd.Process.Pid)
	go func() {
		a.cmd.Wait()
		a.fr.exited()
		close(a.exited)
	}()
	t.Cleanup(a.stop)
	deadline := time.Now().Add(waitLong)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := client.GetHealth(ctx, a.url, nil)
		cancel()
		if err == nil {
			return a, nil
		}
		select {
		case <-a.exited:
			return nil, fmt.Errorf("agent exited (%v): %s", a.cmd.ProcessState, a.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("agent not healthy after %v: %v", waitLong, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// agentEnv is this process's environment without RAYITO_ variables, plus
// the test token if wanted.
func agentEnv(token bool) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RAYITO_") {
			env = append(env, kv)
		}
	}
	if token {
		env = append(env, "RAYITO_ACCESS_TOKEN="+testToken)
	}
	return env
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// stop stops the agent politely, then kills whatever is left; it runs
// at cleanup, and may run earlier.
func (a *agent) stop() { a.stopOnce.Do(a.cleanup) }

func (a *agent) cleanup() {
	if a.frozen {
		a.fr.thaw()
	}
	select {
	case <-a.exited:
	default:
		a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.exited:
		case <-time.After(15 * time.Second):
			a.t.Logf("agent did not stop within 15 s of SIGTERM")
		}
	}
	a.fr.close()
	<-a.exited
	if a.t.Failed() {
		a.t.Logf("agent log (%s freezer):\n%s", a.fr.kind(), a.logTail())
	}
}

// logTail is the end of the agent's log.
func (a *agent) logTail() string {
	b, _ := os.ReadFile(a.logPath)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// pause freezes the agent's whole tree.
func (a *agent) pause(t testing.TB) {
	t.Helper()
	if err := a.fr.freeze(); err != nil {
		t.Fatalf("freezing the agent (%s): %v", a.fr.kind(), err)
	}
	a.frozen = true
}

// unpause thaws it; the test then tells the agent, as a host would.
func (a *agent) unpause(t testing.TB) {
	t.Helper()
	if err := a.fr.thaw(); err != nil {
		t.Fatalf("thawing the agent (%s): %v", a.fr.kind(), err)
	}
	a.frozen = false
}

// powerOff kills the agent and everything it started at once, as a VM
// that is switched off: nothing gets to save anything.
func (a *agent) powerOff(t testing.TB) {
	t.Helper()
	if err := a.fr.killAll(); err != nil {
		t.Fatalf("killing the agent's tree: %v", err)
	}
	a.frozen = false
	select {
	case <-a.exited:
	case <-time.After(waitLong):
		t.Fatal("agent still running after SIGKILL")
	}
}

// dial connects a client with the test token (unless opts has one).
func (a *agent) dial(t testing.TB, opts client.Options) *client.Client {
	t.Helper()
	if opts.Token == "" {
		opts.Token = testToken
	}
	c, err := client.Dial(ctxLong(t), a.url, opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// health reads /health, all of it: with the test token.
func (a *agent) health(t testing.TB) client.Health {
	t.Helper()
	h, err := client.Host{URL: a.url, Token: testToken}.Health(ctxLong(t))
	if err != nil {
		t.Fatalf("health: %v", err)
	}
	return h
}

// request makes an HTTP request to the agent; token "" sends none.
func (a *agent) request(t testing.TB, method, path, token, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctxLong(t), method, "http://"+a.addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return resp.StatusCode, bytes.TrimSpace(b)
}

func ctxLong(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or waitLong passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readAll reads r to its end.
func readAll(t testing.TB, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading: %v", err)
	}
	return string(b)
}
