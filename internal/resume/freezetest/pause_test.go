package freezetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/rayito/rayito-agent/client"
)

// longPause is how long TestReadAcrossLongPause keeps the agent frozen:
// five times the Go client's default reconnect budget.
const longPause = 5 * time.Minute

// hostPause is the host's POST /v1/pause, which must succeed.
func hostPause(t testing.TB, a *agent, o client.PauseOptions) client.PauseAnswer {
	t.Helper()
	ans, err := client.Host{URL: a.url, Token: testToken}.Pause(ctxLong(t), o)
	if err != nil {
		t.Fatalf("pause %+v: %v", o, err)
	}
	return ans
}

// TestPauseSteps: a pause tells the connected client, then runs its steps
// in order and says what each did; health shows it; the resume after the
// freeze bumps the generation once, says how long the pause lasted and
// how it ended, and the client runs again.
func TestPauseSteps(t *testing.T) {
	t.Parallel()
	a := startAgent(t, agentConfig{})
	suspended := make(chan uint64, 4)
	rc := make(reconnects, 16)
	c := a.dial(t, client.Options{OnReconnect: func(gen uint64) { rc <- gen }, OnSuspend: func(gen uint64) { suspended <- gen }})
	if c.State() != client.StateRunning {
		t.Fatalf("a fresh client's state is %s", c.State())
	}
	ans := hostPause(t, a, client.PauseOptions{Mode: "filesystem", Shrink: "cache", DeadlineMs: 30000})
	var names []string
	for _, s := range ans.Steps {
		names = append(names, s.Step)
		if s.Status == "failed" || s.Status == "not_started" || s.Status == "running" {
			t.Errorf("step %s: %+v", s.Step, s)
		}
	}
	if got := strings.Join(names, ","); got != "notify,hooks,freeze,sync,fsfreeze,shrink" {
		t.Errorf("steps %s, want notify,hooks,freeze,sync,fsfreeze,shrink in that order", got)
	}
	if s, _ := ans.Step("notify"); s.Status != "done" || s.Detail != "1 connections told" {
		t.Errorf("notify: %+v, want the one client told", s)
	}
	if s, _ := ans.Step("sync"); s.Status != "done" || !strings.Contains(s.Detail, "synced /") {
		t.Errorf("sync: %+v", s)
	}
	// Not a sandbox VM: the freeze, FIFREEZE and the page cache are left,
	// each saying why (rootfs/e2e checks them done in the VM).
	for _, name := range []string{"freeze", "fsfreeze"} {
		if s, _ := ans.Step(name); s.Status != "skipped" || !strings.Contains(s.Detail, "changes that") {
			t.Errorf("%s outside a VM image: %+v, want skipped with the flag that changes it", name, s)
		}
	}
	if ans.State != "paused" || ans.DeadlinePassed || ans.Generation != 0 || ans.Mode != "filesystem" || ans.Shrink != "cache" ||
		ans.MemAvailableBefore <= 0 || ans.MemAvailableAfter <= 0 || ans.ThawAfterMs != 30000 {
		t.Errorf("answer: %+v", ans)
	}
	select {
	case gen := <-suspended:
		if gen != 0 {
			t.Errorf("OnSuspend said generation %d, want 0", gen)
		}
	case <-time.After(waitLong):
		t.Fatal("the client never heard suspending")
	}
	if c.State() != client.StateSuspended {
		t.Errorf("after suspending the client's state is %s", c.State())
	}
	if h := a.health(t); !h.Paused || h.Pause == nil || h.Pause.State != "paused" || h.Pause.AtUnixMs != ans.AtUnixMs {
		t.Errorf("health during the pause: paused %v, pause %+v", h.Paused, h.Pause)
	}
	// Without the token, health says paused too: a host's probe reads it.
	code, body := a.request(t, "GET", "/health", "", "")
	if code != http.StatusOK || !strings.Contains(string(body), `"paused":true`) {
		t.Errorf("public health during the pause: %d %s", code, body)
	}
	// A second client connecting now hears it in its hello.
	late := a.dial(t, client.Options{})
	if late.State() != client.StateSuspended {
		t.Errorf("a client connecting during the pause is %s", late.State())
	}

	a.pause(t)
	time.Sleep(pauseFor)
	a.unpause(t)
	h, err := c.Resume(ctxLong(t), client.ResumeOptions{ResumeID: "after-pause"})
	if err != nil {
		t.Fatal(err)
	}
	rc.wait(t, 1)
	if h.ResumeGeneration != 1 || h.Paused || h.Pause != nil || h.LastResume == nil || h.LastResume.PausedMs == nil ||
		*h.LastResume.PausedMs < pauseFor.Milliseconds() {
		t.Fatalf("resume after the pause: %+v, last %+v", h, h.LastResume)
	}
	if h.LastPause == nil || h.LastPause.Ended != "resume" || h.LastPause.AtUnixMs != ans.AtUnixMs || h.LastPause.Thaw == nil {
		t.Errorf("last_pause after the resume: %+v", h.LastPause)
	}
	if c.State() != client.StateRunning {
		t.Errorf("after the resume the client's state is %s", c.State())
	}
	eventually(t, "the late client hears the resume", func() bool { return late.State() == client.StateRunning })
}

// TestPauseAbortAndAutoThaw: an abort thaws without a new generation and
// tells clients; abort without a pause is conflict; a pause no resume or
// abort follows thaws by itself after thaw_after_ms.
func TestPauseAbortAndAutoThaw(t *testing.T) {
	t.Parallel()
	a := startAgent(t, agentConfig{})
	c := a.dial(t, client.Options{})
	host := client.Host{URL: a.url, Token: testToken}
	hostPause(t, a, client.PauseOptions{})
	eventually(t, "the client hears suspending", func() bool { return c.State() == client.StateSuspended })
	ab, err := host.AbortPause(ctxLong(t))
	if err != nil || ab.State != "running" || ab.Generation != 0 || ab.Thaw == nil {
		t.Fatalf("abort: %+v, %v", ab, err)
	}
	eventually(t, "the client hears the abort", func() bool { return c.State() == client.StateRunning })
	h := a.health(t)
	if h.Paused || h.ResumeGeneration != 0 || h.LastPause == nil || h.LastPause.Ended != "abort" {
		t.Errorf("health after the abort: %+v, last_pause %+v", h, h.LastPause)
	}
	// The client's connection was never cut: it still works as it was.
	if p, err := c.Exec(ctxLong(t), client.ExecOptions{Argv: []string{"echo", "still here"}}); err != nil {
		t.Fatal(err)
	} else if out := readAll(t, p.Stdout()); out != "still here\n" {
		t.Errorf("exec after the abort: %q", out)
	}
	var ce *client.Error
	if _, err := host.AbortPause(ctxLong(t)); !errors.As(err, &ce) || ce.Code != client.CodeConflict || !strings.Contains(ce.Message, "no pause") {
		t.Errorf("abort without a pause: %v, want conflict naming it", err)
	}

	started := time.Now()
	hostPause(t, a, client.PauseOptions{ThawAfterMs: 1000})
	eventually(t, "the pause thaws by itself", func() bool { return !a.health(t).Paused })
	if took := time.Since(started); took < time.Second {
		t.Errorf("auto-thawed after %v, before thaw_after_ms", took)
	}
	h = a.health(t)
	if h.ResumeGeneration != 0 || h.LastPause == nil || h.LastPause.Ended != "auto_thaw" {
		t.Errorf("health after the auto-thaw: generation %d, last_pause %+v", h.ResumeGeneration, h.LastPause)
	}
	eventually(t, "the client hears the auto-thaw", func() bool { return c.State() == client.StateRunning })
}

// TestPauseBadInput: every malformed pause gets 400 naming the field; a
// pause during a pause shares it (same parameters) or is conflict (other
// ones); a resume during a pause thaws it.
func TestPauseBadInput(t *testing.T) {
	t.Parallel()
	a := startAgent(t, agentConfig{})
	for _, tc := range []struct{ body, want string }{
		{`{"mode": "disk"}`, "mode must be memory or filesystem"},
		{`{"shrink": "some"}`, "shrink must be none, cache or all"},
		{`{"deadline_ms": 0}`, "deadline_ms must be 1 to 60000, got 0"},
		{`{"deadline_ms": -5}`, "deadline_ms must be 1 to 60000, got -5"},
		{`{"deadline_ms": 1000000000000}`, "deadline_ms must be 1 to 60000"},
		{`{"thaw_after_ms": 10}`, "thaw_after_ms must be 1000 to 86400000, got 10"},
		{`{"thaw_after_ms": 1e20}`, "thaw_after_ms"},
		{`{"mode": "memory", "color": "red"}`, "color"},
		{`[]`, "object"},
		{`{"mode": "memory"} {}`, "after"},
	} {
		code, body := a.request(t, "POST", "/v1/pause", testToken, tc.body)
		if code != http.StatusBadRequest || !strings.Contains(string(body), tc.want) {
			t.Errorf("pause %s: %d %s, want 400 saying %q", tc.body, code, body, tc.want)
		}
	}
	if code, body := a.request(t, "POST", "/v1/pause", "", `{}`); code != http.StatusUnauthorized {
		t.Errorf("pause without the token: %d %s", code, body)
	}
	if h := a.health(t); h.Paused {
		t.Fatalf("bad pauses left a pause in place: %+v", h.Pause)
	}

	first := hostPause(t, a, client.PauseOptions{Shrink: "cache"})
	if again := hostPause(t, a, client.PauseOptions{Shrink: "cache"}); again.AtUnixMs != first.AtUnixMs {
		t.Errorf("a repeated pause started another: %+v, first %+v", again, first)
	}
	code, body := a.request(t, "POST", "/v1/pause", testToken, `{"shrink": "all"}`)
	if code != http.StatusConflict || !strings.Contains(string(body), "abort it first") {
		t.Errorf("a pause with other parameters: %d %s", code, body)
	}
	// The host resumes without freezing the VM after all: a resume.
	code, body = a.request(t, "POST", "/v1/resume", testToken, `{"resume_id": "r1"}`)
	var h client.Health
	if code != http.StatusOK || json.Unmarshal(body, &h) != nil || h.ResumeGeneration != 1 || h.Paused || h.LastPause == nil || h.LastPause.Ended != "resume" {
		t.Fatalf("resume during a pause: %d %s", code, body)
	}
	// (A resume that overtakes a pause still quiescing: resume's
	// TestResumeOvertakesPause, which can hold the quiesce where it wants.)
}

// TestReadAcrossLongPause: a client whose reconnect budget is a second,
// with pings every 200 ms, reads a command's output across a pause of
// five minutes (the agent's whole tree frozen, as a VM is) and gets every
// byte once the sandbox is back; a call made during the pause succeeds
// after it. Without the pause notice the client gives up after a second.
func TestReadAcrossLongPause(t *testing.T) {
	t.Parallel()
	a := startAgent(t, agentConfig{})
	opts := client.Options{Logger: zaptest.NewLogger(t), ReconnectTimeout: time.Second, PingInterval: 200 * time.Millisecond}

	// Without the notice, such a client gives up within seconds of a
	// silent sandbox: what the notice is for.
	c0 := a.dial(t, opts)
	p0, err := c0.Exec(ctxLong(t), client.ExecOptions{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	a.pause(t)
	if _, err := io.ReadAll(p0.Stdout()); !errors.Is(err, client.ErrConnectionLost) {
		t.Errorf("a read across a pause nobody announced: %v, want ErrConnectionLost", err)
	}
	a.unpause(t)

	rc := make(reconnects, 16)
	opts.OnReconnect = func(gen uint64) { rc <- gen }
	c := a.dial(t, opts)
	gate := filepath.Join(t.TempDir(), "gate")
	ctx, cancel := context.WithTimeout(context.Background(), longPause+3*waitLong)
	defer cancel()
	p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"sh", "-c", "echo before; while [ ! -e " + gate + " ]; do sleep 0.05; done; echo after"}})
	if err != nil {
		t.Fatal(err)
	}
	hostPause(t, a, client.PauseOptions{})
	eventually(t, "the client hears suspending", func() bool { return c.State() == client.StateSuspended })
	a.pause(t)
	during := make(chan error, 1)
	go func() {
		p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"echo", "during"}})
		if err == nil {
			var st client.ExitStatus
			if st, err = p.Wait(ctx); err == nil && st.ExitCode() != 0 {
				err = fmt.Errorf("exit %d", st.ExitCode())
			}
		}
		during <- err
	}()
	time.Sleep(longPause)
	a.unpause(t)
	if _, err := c.Resume(ctxLong(t), client.ResumeOptions{ResumeID: "long"}); err != nil {
		t.Fatal(err)
	}
	rc.wait(t, 1)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out := readAll(t, p.Stdout()); out != "before\nafter\n" {
		t.Errorf("output across the pause: %q", out)
	}
	if st, err := p.Wait(ctx); err != nil || st.ExitCode() != 0 {
		t.Errorf("the command across the pause: %+v, %v", st, err)
	}
	if err := <-during; err != nil {
		t.Errorf("the exec sent during the pause: %v", err)
	}
}

// TestResumeNetworkFactsBadInput: a resume whose network facts are
// malformed is refused whole (400 naming the field): no resume runs.
func TestResumeNetworkFactsBadInput(t *testing.T) {
	t.Parallel()
	a := startAgent(t, agentConfig{})
	for _, tc := range []struct{ network, want string }{
		{`{"address": "10.0.2.15"}`, "network.address must be an IPv4 address with its prefix length"},
		{`{"address": "10.0.2.15/24", "gateway": "10.9.9.9"}`, "not in network.address's network"},
		{`{"dns": ["1.1.1.1", "1.0.0.1", "8.8.8.8", "9.9.9.9"]}`, "network.dns takes at most 3"},
		{`{"dns": "1.1.1.1"}`, "dns"},
		{`{"interface": "../eth0"}`, "not an interface name"},
		{`{"mtu": 1400}`, "mtu"},
	} {
		code, body := a.request(t, "POST", "/v1/resume", testToken, `{"resume_id": "n", "network": `+tc.network+`}`)
		if code != http.StatusBadRequest || !strings.Contains(string(body), tc.want) {
			t.Errorf("network %s: %d %s, want 400 saying %q", tc.network, code, body, tc.want)
		}
	}
	if h := a.health(t); h.ResumeGeneration != 0 || h.LastResume != nil {
		t.Errorf("a refused resume ran: %+v", h)
	}
}

// TestHooksAroundAPause: the agent's pre-pause hooks run inside the pause
// (in its answer), its post-resume hooks inside the resume that follows,
// told the generation and how long the pause lasted (in last_resume);
// and the lifecycle file follows both.
func TestHooksAroundAPause(t *testing.T) {
	t.Parallel()
	hooks, out := t.TempDir(), filepath.Join(t.TempDir(), "out")
	for _, ev := range []string{"pre-pause", "post-resume"} {
		os.MkdirAll(filepath.Join(hooks, ev+".d"), 0o755)
		script := "#!/bin/sh\necho \"$RAYITO_EVENT $RAYITO_RESUME_GENERATION $RAYITO_CLONE $RAYITO_PAUSED_MS\" >> " + out + "\n"
		if err := os.WriteFile(filepath.Join(hooks, ev+".d", "10-log"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	life := filepath.Join(t.TempDir(), "lifecycle.json")
	a := startAgent(t, agentConfig{Args: []string{"--hooks-dir", hooks, "--lifecycle-file", life}})
	readLife := func() map[string]any {
		t.Helper()
		var m map[string]any
		b, err := os.ReadFile(life)
		if err != nil || json.Unmarshal(b, &m) != nil {
			t.Fatalf("lifecycle file: %s, %v", b, err)
		}
		return m
	}
	ans := hostPause(t, a, client.PauseOptions{})
	if s, _ := ans.Step("hooks"); s.Status != "done" || s.Detail != "1 hooks, 0 failed" || len(ans.Hooks) != 1 || ans.Hooks[0].Event != "pre-pause" {
		t.Errorf("the pause's hooks: %+v, %+v", s, ans.Hooks)
	}
	if m := readLife(); m["state"] != "paused" {
		t.Errorf("lifecycle during the pause: %v", m)
	}
	a.pause(t)
	time.Sleep(pauseFor)
	a.unpause(t)
	h, err := client.Host{URL: a.url, Token: testToken}.Resume(ctxLong(t), client.ResumeOptions{ResumeID: "hooks"})
	if err != nil {
		t.Fatal(err)
	}
	if lr := h.LastResume; lr == nil || len(lr.Hooks) != 1 || lr.Hooks[0].Event != "post-resume" || lr.Hooks[0].ExitCode == nil || *lr.Hooks[0].ExitCode != 0 {
		t.Errorf("the resume's hooks: %+v", h.LastResume)
	}
	b, _ := os.ReadFile(out)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || lines[0] != "pre-pause 0 0 0" || !strings.HasPrefix(lines[1], "post-resume 1 0 ") {
		t.Fatalf("the hooks were told %q", lines)
	}
	if ms, _ := strconv.Atoi(strings.Fields(lines[1])[3]); ms < int(pauseFor.Milliseconds()) {
		t.Errorf("RAYITO_PAUSED_MS %d, want at least the %v pause", ms, pauseFor)
	}
	if m := readLife(); m["state"] != "running" || m["resume_generation"] != float64(1) {
		t.Errorf("lifecycle after the resume: %v", m)
	}
}

// TestResumeOutlivesAHostThatLeaves: a host that gives up on /v1/resume
// after 50 ms (curl -m) changes nothing about what the resume does: its
// post-resume hook runs its whole second, not killed and not timed out;
// the native client still hears of the resume (a reconnect at the new
// generation); and the host's retry with the same resume_id gets the
// whole answer, the hook's exit in it.
func TestResumeOutlivesAHostThatLeaves(t *testing.T) {
	t.Parallel()
	hooks := t.TempDir()
	os.MkdirAll(filepath.Join(hooks, "post-resume.d"), 0o755)
	if err := os.WriteFile(filepath.Join(hooks, "post-resume.d", "10-slow"), []byte("#!/bin/sh\nsleep 1\necho finished >&2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, agentConfig{Args: []string{"--hooks-dir", hooks, "--hook-timeout", "5s"}})
	c, rc := dialCounted(t, a)
	hostPause(t, a, client.PauseOptions{})
	a.pause(t)
	a.unpause(t)
	impatient, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := (client.Host{URL: a.url, Token: testToken}).Resume(impatient, client.ResumeOptions{ResumeID: "leaves"}); err == nil {
		t.Fatal("the resume answered within 50 ms: its 1 s hook did not run")
	}
	rc.wait(t, 1)
	h, err := c.Resume(ctxLong(t), client.ResumeOptions{ResumeID: "leaves"})
	if err != nil {
		t.Fatal(err)
	}
	lr := h.LastResume
	if h.ResumeGeneration != 1 || lr == nil || lr.ResumeID != "leaves" || len(lr.Hooks) != 1 {
		t.Fatalf("the retry's answer: %+v, last %+v", h, lr)
	}
	hk := lr.Hooks[0]
	if hk.TimedOut || hk.Killed != "" || hk.ExitCode == nil || *hk.ExitCode != 0 || hk.StderrTail != "finished\n" || hk.DurationMs < 1000 {
		t.Errorf("the hook, with the host gone: %+v", hk)
	}
}
