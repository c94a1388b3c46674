package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rayito/rayito-agent/internal/resume"
)

func (a *testAgent) post(t *testing.T, path, token, body string) (int, map[string]any) {
	req, _ := http.NewRequest("POST", a.http.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %s", path, b)
	}
	return resp.StatusCode, m
}

// TestResumeCutsOldConnectionsAndReattachLosesNothing runs a counter
// across a resume: the old connection gets `end` reason resume with its
// cursors and a 4000 close; attaching again from those cursors on a new
// connection continues the output with no byte lost or repeated.
func TestResumeCutsOldConnectionsAndReattachLosesNothing(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	id := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"sh", "-c", "for i in $(seq 1 300); do echo line $i; sleep 0.005; done"}}))
	var got []byte
	// Read some output, then resume.
	for len(got) < 100 {
		_, d := rc.read()
		if d != nil {
			got = append(got, d.Payload...)
		}
	}
	resumed := make(chan map[string]any, 1)
	go func() {
		_, m := a.post(t, "/v1/resume", testToken, `{"resume_id":"r1"}`)
		resumed <- m
	}()
	var end map[string]any
	for end == nil {
		m, d := rc.read()
		if d != nil {
			if uint64(len(got)) != d.Offset {
				t.Fatalf("offset %d after %d bytes", d.Offset, len(got))
			}
			got = append(got, d.Payload...)
		} else if m["event"] == "end" {
			end = m
		}
	}
	if end["reason"] != "resume" {
		t.Fatalf("end %v", end)
	}
	cursors := end["cursors"].(map[string]any)
	if uint64(cursors["stdout"].(float64)) != uint64(len(got)) {
		t.Fatalf("end cursors %v, received %d bytes", cursors, len(got))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err := rc.c.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 4000 || ce.Reason != "resumed" {
		t.Fatalf("after end: %v, want close 4000 resumed", err)
	}
	h := <-resumed
	if h["resume_generation"].(float64) != 1 {
		t.Fatalf("resume answered %v", h)
	}

	rc2 := a.dial(t)
	r := rc2.call(map[string]any{"op": "attach", "stream": id, "from": map[string]uint64{"stdout": uint64(len(got))}})
	if r["error"] != nil {
		t.Fatalf("reattach: %v", r)
	}
	rest, fin := rc2.collectFrom(id, uint64(len(got)))
	got = append(got, rest["stdout"]...)
	if fin["reason"] != "exit" {
		t.Fatalf("final end %v", fin)
	}
	var want strings.Builder
	for i := 1; i <= 300; i++ {
		want.WriteString("line " + strconv.Itoa(i) + "\n")
	}
	if string(got) != want.String() {
		t.Fatalf("output across resume differs: got %d bytes, want %d", len(got), want.Len())
	}
}

func TestResumeBadInput(t *testing.T) {
	a := newTestAgent(t)
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
		if status, m := a.post(t, "/v1/resume", c.token, c.body); status != c.status || m["error"] == nil {
			t.Errorf("%q with token %q: %d %v, want %d and an error", c.body, c.token, status, m, c.status)
		}
	}
	if _, m := a.post(t, "/v1/resume", testToken, ``); m["resume_generation"].(float64) != 1 {
		t.Fatalf("empty body resume: %v", m)
	}
}

func TestInit(t *testing.T) {
	a := newTestAgent(t)
	// The test agent already has a token: init needs it.
	if status, _ := a.post(t, "/v1/init", "", `{}`); status != 401 {
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
		if status, m := a.post(t, "/v1/init", testToken, b); status != 400 || m["error"] == nil {
			t.Errorf("%s: %d %v", b, status, m)
		}
	}
	dir := t.TempDir()
	status, _ := a.post(t, "/v1/init", testToken, `{"env": {"GREETING": "hola"}, "default_cwd": "`+dir+`", "idle_policy": {"max_idle_seconds": 120}, "access_token": "new-token"}`)
	if status != 200 {
		t.Fatalf("init: %d", status)
	}
	if status, _ := a.post(t, "/v1/init", testToken, `{}`); status != 401 {
		t.Fatalf("old token still accepted after init changed it: %d", status)
	}
	if tr := a.traffic.Snapshot(); tr.IdlePolicy == nil || tr.IdlePolicy.MaxIdleSeconds != 120 {
		t.Fatalf("idle policy not applied: %+v", tr)
	}
	// New processes get the env and cwd.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, a.url+"/v1/connect?access_token=new-token", nil)
	if err != nil {
		t.Fatal(err)
	}
	rc := &rawConn{t: t, c: c}
	defer c.CloseNow()
	rc.readControl()
	id := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"sh", "-c", "echo $GREETING; pwd"}}))
	out, _ := rc.collect(id)
	if string(out["stdout"]) != "hola\n"+dir+"\n" {
		t.Fatalf("process did not get init's env and cwd: %q", out["stdout"])
	}
}

func TestInitSetsFirstToken(t *testing.T) {
	a := newTestAgentWithToken(t, "")
	if status, _ := a.post(t, "/v1/init", "", `{"access_token": "first"}`); status != 200 {
		t.Fatalf("first init: %d", status)
	}
	if status, _ := a.post(t, "/v1/init", "", `{"access_token": "second"}`); status != 401 {
		t.Fatalf("second init without the token: %d", status)
	}
	if status, _ := a.post(t, "/v1/init", "first", `{}`); status != 200 {
		t.Fatalf("init with the token it set: %d", status)
	}
}

// TestUeventThenHostPostBumpsOnce: the guest notices the restore through
// the VMGenID uevent before the host's POST arrives; both describe one
// resume, so the generation moves by one per restore.
func TestUeventThenHostPostBumpsOnce(t *testing.T) {
	a := newTestAgent(t)
	l, err := resume.ListenUevents(func() {
		a.resume.Resume(context.Background(), resume.Report{Source: resume.SourceVMGenID})
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
		if g := a.resume.Generation(); g != uint64(cycle) {
			t.Fatalf("cycle %d: uevent gave generation %d", cycle, g)
		}
		_, h := a.post(t, "/v1/resume", testToken, `{"resume_id": "cycle-`+strconv.Itoa(cycle)+`"}`)
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
	a := newTestAgentWithToken(t, "")
	send := func(path, ctype, origin, body string) int {
		req, _ := http.NewRequest("POST", a.http.URL+path, strings.NewReader(body))
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
	req, _ := http.NewRequest("POST", a.http.URL+"/v1/resume", strings.NewReader(`{}`))
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
