package hostapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/internal/hostapi"
	"github.com/rayito/rayito-agent/internal/resume"
)

// The host's routes (/v1/init, /v1/resume, /v1/traffic, /health,
// /metrics) as a host and the processes after it see them.

func TestResumeBadInput(t *testing.T) {
	a := newAgent(t, testToken)
	cases := []struct {
		token, body string
		status      int
	}{
		{"", `{}`, 401},
		{"wrong", `{}`, 401},
		{testToken, `{"resume_id": 5}`, 400},
		{testToken, `{"time_unix_ns": -1}`, 400},
		{testToken, `{"unknown": true}`, 400},
		{testToken, `not json`, 400},
	}
	for _, c := range cases {
		if status, m := post(t, a, "/v1/resume", c.token, c.body); status != c.status || m["error"] == nil {
			t.Errorf("%q with token %q: %d %v, want %d and an error", c.body, c.token, status, m, c.status)
		}
	}
	if _, m := post(t, a, "/v1/resume", testToken, ``); m["resume_generation"].(float64) != 1 {
		t.Fatalf("empty body resume: %v", m)
	}
}

func TestInit(t *testing.T) {
	a := newAgent(t, testToken)
	// The test agent already has a token: init needs it.
	if status, _ := post(t, a, "/v1/init", "", `{}`); status != 401 {
		t.Fatalf("init without token: %d", status)
	}
	bad := []string{
		`{"idle_policy": {"max_idle_seconds": 59}}`,
		`{"idle_policy": {"max_idle_seconds": -5}}`,
		`{"default_cwd": "/no/such/dir"}`,
		`{"default_user": "no-such-user-xyz"}`,
		`{"env": {"A=B": "x"}}`,
		`{"access_token": ""}`,
		`{"nope": 1}`,
	}
	for _, b := range bad {
		if status, m := post(t, a, "/v1/init", testToken, b); status != 400 || m["error"] == nil {
			t.Errorf("%s: %d %v", b, status, m)
		}
	}
	dir := t.TempDir()
	status, _ := post(t, a, "/v1/init", testToken, `{"env": {"GREETING": "hola"}, "default_cwd": "`+dir+`", "idle_policy": {"max_idle_seconds": 120}, "access_token": "new-token"}`)
	if status != 200 {
		t.Fatalf("init: %d", status)
	}
	if status, _ := post(t, a, "/v1/init", testToken, `{}`); status != 401 {
		t.Fatalf("old token still accepted after init changed it: %d", status)
	}
	if tr := a.Counter.Snapshot(); tr.IdlePolicy == nil || tr.IdlePolicy.MaxIdleSeconds != 120 {
		t.Fatalf("idle policy not applied: %+v", tr)
	}
	// New processes get the env and cwd.
	if out := run(t, a, "new-token", "echo $GREETING; pwd"); out != "hola\n"+dir+"\n" {
		t.Fatalf("process did not get init's env and cwd: %q", out)
	}
}

func TestInitSetsFirstToken(t *testing.T) {
	a := newAgent(t, "")
	if status, _ := post(t, a, "/v1/init", "", `{"access_token": "first"}`); status != 200 {
		t.Fatalf("first init: %d", status)
	}
	if status, _ := post(t, a, "/v1/init", "", `{"access_token": "second"}`); status != 401 {
		t.Fatalf("second init without the token: %d", status)
	}
	if status, _ := post(t, a, "/v1/init", "first", `{}`); status != 200 {
		t.Fatalf("init with the token it set: %d", status)
	}
}

// TestUeventThenHostPostBumpsOnce: the guest notices the restore through
// the VMGenID uevent before the host's POST arrives; both describe one
// resume, so the generation moves by one per restore.
func TestUeventThenHostPostBumpsOnce(t *testing.T) {
	a := newAgent(t, testToken)
	l, err := resume.ListenUevents(func() {
		a.Resumer.Resume(context.Background(), resume.Report{Source: resume.SourceVMGenID})
	})
	if err != nil {
		t.Skipf("no uevent socket: %v", err)
	}
	defer l.Close()
	uevent := []byte("change@/devices/LNXSYSTM:00/LNXSYBUS:00/QEMUVGID:00\x00ACTION=change\x00SUBSYSTEM=acpi\x00NEW_VMGENID=1\x00SEQNUM=77\x00")
	for cycle := 1; cycle <= 2; cycle++ {
		if !l.Handle(uevent) {
			t.Fatal("vmgenid uevent not taken")
		}
		if g := a.Resumer.Generation(); g != uint64(cycle) {
			t.Fatalf("cycle %d: uevent gave generation %d", cycle, g)
		}
		_, h := post(t, a, "/v1/resume", testToken, `{"resume_id": "cycle-`+strconv.Itoa(cycle)+`"}`)
		if h["resume_generation"].(float64) != float64(cycle) {
			t.Fatalf("cycle %d: host POST after the uevent bumped again: %v", cycle, h)
		}
	}
}

// TestHostRoutesRefusePages: the host's calls come without an Origin and
// with a JSON body; what a web page can send without a preflight (a form
// or text/plain post, any request with an Origin) is refused, and a
// refused first /v1/init does not use up the token-less first call.
func TestHostRoutesRefusePages(t *testing.T) {
	t.Parallel()
	a := newAgent(t, "")
	send := func(path, ctype, origin, body string) int {
		req, _ := http.NewRequest("POST", a.URL+path, strings.NewReader(body))
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	const takeOver = `{"access_token": "evil", "env": {"LD_PRELOAD": "/tmp/x.so"}}`
	for _, tc := range []struct{ ctype, origin string }{
		{"text/plain", "https://evil.example"},
		{"text/plain", ""},
		{"application/x-www-form-urlencoded", ""},
		{"multipart/form-data; boundary=x", ""},
		{"application/json", "https://evil.example"},
		{"", ""},
	} {
		if code := send("/v1/init", tc.ctype, tc.origin, takeOver); code != http.StatusBadRequest {
			t.Errorf("init as %q from %q: %d, want 400", tc.ctype, tc.origin, code)
		}
	}
	if code := send("/v1/init", "application/json; charset=utf-8", "", `{"access_token": "host-token"}`); code != http.StatusOK {
		t.Fatalf("the host's first init after the refused ones: %d", code)
	}
	req, _ := http.NewRequest("POST", a.URL+"/v1/resume", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer host-token")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "https://evil.example")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("resume with an Origin: %d, want 400", resp.StatusCode)
	}
}

// TestOnlyFirstInitIsOpen: without a token, the first /v1/init needs
// none; every later one does, whether or not the first set a token, so
// nobody can inject environment into later processes.
func TestOnlyFirstInitIsOpen(t *testing.T) {
	t.Parallel()
	a := newAgent(t, "")
	// A refused first call (bad body) does not use the open call up.
	if status, _ := post(t, a, "/v1/init", "", `{"default_cwd": "/no/such/dir"}`); status != http.StatusBadRequest {
		t.Fatalf("bad first init: %d", status)
	}
	if status, _ := post(t, a, "/v1/init", "", `{"default_cwd": "/tmp"}`); status != http.StatusOK {
		t.Fatalf("first init: %d", status)
	}
	status, m := post(t, a, "/v1/init", "", `{"env": {"INJECTED": "yes"}}`)
	if status != http.StatusUnauthorized || m["error"] == nil {
		t.Fatalf("second init without a token after a first that set none: %d %v", status, m)
	}
	a.Auth.Set(testToken)
	if out := run(t, a, testToken, "echo ${INJECTED-none}; pwd"); out != "none\n/tmp\n" {
		t.Fatalf("after a refused second init a process sees %q, want the first init's cwd only", out)
	}
}

// TestSlowInitBodyBlocksNobody: a caller that sends its init body slowly
// holds only its own request: the host's init goes through meanwhile,
// and the slow one is cut off at its body deadline without effect.
func TestSlowInitBodyBlocksNobody(t *testing.T) {
	t.Parallel()
	a := newAgent(t, "")
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
		a.Server.Handler().ServeHTTP(w, r)
	}))
	defer hs.Close()
	a.URL = hs.URL
	slow, err := net.Dial("tcp", strings.TrimPrefix(a.URL, "http://"))
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
	req, _ := http.NewRequestWithContext(ctx, "POST", a.URL+"/v1/init", strings.NewReader(`{"access_token": "host-token"}`))
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
	if status, _ := post(t, a, "/v1/init", "host-token", `{}`); status != http.StatusOK {
		t.Fatalf("the host's token did not stay: %d", status)
	}
}

// TestHostBodiesMustBeObjects: a body that is JSON but not an object is
// refused (null is not "nothing"), and messages speak JSON, not Go.
func TestHostBodiesMustBeObjects(t *testing.T) {
	t.Parallel()
	a := newAgent(t, testToken)
	for _, path := range []string{"/v1/init", "/v1/resume"} {
		for body, want := range map[string]string{
			`[]`:                       "must be a JSON object",
			`null`:                     "must be a JSON object",
			`"x"`:                      "must be a JSON object",
			`7`:                        "must be a JSON object",
			`{"nope": 1}`:              `unknown field "nope"`,
			`{"time_unix_ns": "soon"}`: "time_unix_ns must be a whole number, not a string",
		} {
			status, m := post(t, a, path, testToken, body)
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
	status, m := post(t, a, "/v1/init", testToken, `{"env": 5}`)
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

// TestPollsDoNotCountAsTraffic: a host that probes health, scrapes metrics
// and polls traffic must not keep the sandbox awake.
func TestPollsDoNotCountAsTraffic(t *testing.T) {
	a := newAgent(t, testToken)
	before := a.Counter.Snapshot()
	for i := 0; i < 20; i++ {
		for _, p := range []string{"/health", "/v1/traffic", "/metrics"} {
			if status, _ := get(t, a, p); status != 200 {
				t.Fatalf("%s: %d", p, status)
			}
		}
	}
	after := a.Counter.Snapshot()
	if after.BytesIn != 0 || after.BytesOut != 0 || after.LastActivityUnixMs != before.LastActivityUnixMs {
		t.Fatalf("polls counted: before %+v after %+v", before, after)
	}
	// Websocket payloads do count, both ways.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, a.WS, client.Options{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.List(ctx, ""); err != nil {
		t.Fatal(err)
	}
	_, body := get(t, a, "/v1/traffic")
	var tr struct {
		BytesIn     uint64 `json:"bytes_in"`
		BytesOut    uint64 `json:"bytes_out"`
		Connections int    `json:"connections"`
	}
	json.Unmarshal(body, &tr)
	if tr.BytesIn == 0 || tr.BytesOut == 0 || tr.Connections != 1 {
		t.Fatalf("websocket traffic not counted: %s", body)
	}
}

func TestAuthRequired(t *testing.T) {
	a := newAgent(t, testToken)
	for _, p := range []string{"/v1/traffic", "/metrics", "/v1/connect"} {
		req, _ := http.NewRequest("GET", a.URL+p, nil)
		req.Header.Set("Authorization", "Bearer wrong")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("%s with a wrong token: %d", p, resp.StatusCode)
		}
	}
	resp, err := http.Get(a.URL + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/health without a token: %v %v", resp, err)
	}
}

// TestResumeResetsIdle: right after a resume the sandbox is not idle: the
// host must not suspend a VM it just woke because it had been quiet
// before the snapshot.
func TestResumeResetsIdle(t *testing.T) {
	t.Parallel()
	a := newAgent(t, testToken)
	a.Counter.SetMaxIdle(60)
	traffic := func() (idleMs int64, idle bool) {
		status, b := get(t, a, "/v1/traffic")
		var tr struct {
			IdleMs int64 `json:"idle_ms"`
			Idle   bool  `json:"idle"`
		}
		if status != 200 || json.Unmarshal(b, &tr) != nil {
			t.Fatalf("/v1/traffic: %d %s", status, b)
		}
		return tr.IdleMs, tr.Idle
	}
	var before int64
	for before < 500 {
		time.Sleep(100 * time.Millisecond)
		before, _ = traffic()
	}
	if status, _ := post(t, a, "/v1/resume", testToken, `{"resume_id": "r1"}`); status != 200 {
		t.Fatalf("resume: %d", status)
	}
	if after, idle := traffic(); after >= before || idle {
		t.Fatalf("after the resume idle_ms is %d (before it %d), idle %v: the resume did not reset the idle clock", after, before, idle)
	}
}
