package endpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/traffic"
	"github.com/rayito/rayito-agent/internal/traffic/traffictest"
)

// newIdleAgent is a test agent whose traffic counter runs on a clock the
// test moves, with a 60 s idle policy.
func newIdleAgent(t *testing.T) (*testAgent, *traffictest.Clock) {
	clock := traffictest.NewClock()
	counter := traffic.NewCounterWithClock(clock)
	if err := counter.SetMaxIdle(60); err != nil {
		t.Fatal(err)
	}
	return newTestAgentWith(t, counter), clock
}

// trafficState reads GET /v1/traffic as a host does.
func (a *testAgent) trafficState(t *testing.T) traffic.Snapshot {
	t.Helper()
	status, body := a.get(t, "/v1/traffic")
	var s traffic.Snapshot
	if status != 200 || json.Unmarshal(body, &s) != nil {
		t.Fatalf("/v1/traffic: %d %s", status, body)
	}
	return s
}

// waitHolds waits until /v1/traffic lists n holds (a stream's end reaches
// its hold on a goroutine of its own).
func (a *testAgent) waitHolds(t *testing.T, n int) traffic.Snapshot {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := a.trafficState(t)
		if len(s.Holds) == n {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("/v1/traffic lists %d holds, want %d: %+v", len(s.Holds), n, s.Holds)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A silent sleep run with keep_awake keeps the sandbox awake far past a
// 60 s policy; once it exits, the sandbox turns idle 60 s later, counted
// from the exit, not from the last byte.
func TestKeepAwakeSilentSleep(t *testing.T) {
	a, clock := newIdleAgent(t)
	rc := a.dial(t)
	// Unattached, so that its end sends no byte that would restart the
	// idle clock by itself.
	r := result(t, rc.call(map[string]any{"op": "exec", "argv": []string{"sleep", "1000"}, "keep_awake": true, "attach": false}))
	id, _ := r["hold"].(string)
	pid := int(r["pid"].(float64))
	if id == "" || pid <= 0 {
		t.Fatalf("exec result %v: want a hold and a pid", r)
	}
	clock.Advance(10 * time.Minute)
	s := a.trafficState(t)
	if s.Idle || s.IdleMs != 0 || len(s.Holds) != 1 {
		t.Fatalf("a silent keep_awake command after 10 min: %+v", s)
	}
	if h := s.Holds[0]; h.Hold != id || h.Stream != uint64(r["stream"].(float64)) || !h.Counting || h.TTLMs != 0 {
		t.Fatalf("hold listed %+v, result %v", h, r)
	}

	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s = a.waitHolds(t, 0)
	if s.Idle || s.IdleMs != 0 {
		t.Fatalf("the idle clock did not start at the command's exit: %+v", s)
	}
	clock.Advance(59 * time.Second)
	if s := a.trafficState(t); s.Idle {
		t.Fatalf("idle 59 s after the exit: %+v", s)
	}
	clock.Advance(time.Second)
	if s := a.trafficState(t); !s.Idle || s.IdleMs != 60000 {
		t.Fatalf("not idle 60 s after the exit: %+v", s)
	}
}

// pty and execute take keep_awake too; each hold lasts as long as its
// stream, and streams made without it hold nothing.
func TestKeepAwakePTYAndExecute(t *testing.T) {
	a, _ := newIdleAgent(t)
	rc := a.dial(t)
	plain := result(t, rc.call(map[string]any{"op": "exec", "argv": []string{"true"}, "attach": false}))
	if _, ok := plain["hold"]; ok {
		t.Fatalf("exec without keep_awake made a hold: %v", plain)
	}
	pty := result(t, rc.call(map[string]any{"op": "pty", "argv": []string{"sleep", "1000"}, "keep_awake": true, "attach": false}))
	cell := result(t, rc.call(map[string]any{"op": "execute", "code": "input('go? ')", "allow_stdin": true, "keep_awake": true, "attach": false}))
	s := a.waitHolds(t, 2)
	for i, r := range []map[string]any{pty, cell} {
		if r["hold"] == nil || s.Holds[i].Hold != r["hold"] || s.Holds[i].Stream != uint64(r["stream"].(float64)) {
			t.Fatalf("holds %+v for results %v and %v", s.Holds, pty, cell)
		}
	}
	// The cell waits for input until answered, so its hold is there for
	// as long as it waits.
	cellStream := uint64(cell["stream"].(float64))
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp := rc.call(map[string]any{"op": "input_reply", "stream": cellStream, "value": "yes"})
		if resp["error"] == nil {
			break
		}
		if errorCode(resp) != "conflict" || time.Now().After(deadline) {
			t.Fatalf("input_reply: %v", resp)
		}
		time.Sleep(20 * time.Millisecond) // the kernel has not asked yet
	}
	if s := a.waitHolds(t, 1); s.Holds[0].Hold != pty["hold"] {
		t.Fatalf("after the cell ended: %+v", s.Holds)
	}
	if resp := rc.call(map[string]any{"op": "signal", "stream": pty["stream"], "signal": "SIGKILL"}); resp["error"] != nil {
		t.Fatal(resp)
	}
	a.waitHolds(t, 0)
}

// A lease counts until its ttl unless renewed; renewing restarts its ttl;
// an expired one cannot be renewed. The op answers with the hold.
func TestHoldLease(t *testing.T) {
	a, clock := newIdleAgent(t)
	rc := a.dial(t)
	h := result(t, rc.call(map[string]any{"op": "hold", "ttl_ms": 30000}))
	id, _ := h["hold"].(string)
	now := clock.Now().UnixMilli()
	if id == "" || h["expires_unix_ms"] != float64(now+30000) || h["created_unix_ms"] != float64(now) || h["ttl_ms"] != 30000.0 || h["counting"] != true {
		t.Fatalf("hold result %v at %d", h, now)
	}
	for range 10 { // 200 s, more than six ttls
		clock.Advance(20 * time.Second)
		r := result(t, rc.call(map[string]any{"op": "hold", "hold": id, "ttl_ms": 30000}))
		if r["hold"] != id || r["expires_unix_ms"] != float64(clock.Now().UnixMilli()+30000) {
			t.Fatalf("renewal %v", r)
		}
	}
	clock.Advance(29 * time.Second)
	if s := a.trafficState(t); s.Idle || len(s.Holds) != 1 || s.Holds[0].Hold != id {
		t.Fatalf("a renewed lease before its end: %+v", s)
	}
	clock.Advance(time.Second)
	if s := a.trafficState(t); s.Idle || len(s.Holds) != 0 || s.IdleMs != 0 {
		t.Fatalf("a lease at its end: %+v", s)
	}
	resp := rc.call(map[string]any{"op": "hold", "hold": id, "ttl_ms": 30000})
	if errorCode(resp) != "not_found" {
		t.Fatalf("renewing an expired lease: %v", resp)
	}
	clock.Advance(time.Minute)
	if s := a.trafficState(t); !s.Idle {
		t.Fatalf("not idle a minute after the lease ended: %+v", s)
	}
}

// Holds belong to the agent: they outlive the connection that made them
// and a resume that cuts every connection, and another connection renews
// and releases them.
func TestHoldsSurviveReconnectAndResume(t *testing.T) {
	a, _ := newIdleAgent(t)
	first := a.dial(t)
	lease := result(t, first.call(map[string]any{"op": "hold", "ttl_ms": 60000}))
	cmd := result(t, first.call(map[string]any{"op": "exec", "argv": []string{"sleep", "1000"}, "keep_awake": true}))
	first.c.CloseNow()
	deadline := time.Now().Add(20 * time.Second)
	for a.trafficState(t).Connections != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the connection never closed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s := a.trafficState(t); len(s.Holds) != 2 || s.Idle {
		t.Fatalf("holds after their connection closed: %+v", s)
	}

	second := a.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a.resume.Resume(ctx, resume.Report{Source: resume.SourceHost})
	s := a.trafficState(t)
	if len(s.Holds) != 2 || s.Holds[0].Hold != lease["hold"] || s.Holds[1].Hold != cmd["hold"] || !s.Holds[0].Counting || !s.Holds[1].Counting {
		t.Fatalf("holds after a resume: %+v", s.Holds)
	}
	if _, _, err := second.c.Read(ctx); err == nil || !strings.Contains(err.Error(), "4000") {
		t.Fatalf("the resume did not cut the connection: %v", err)
	}

	third := a.dial(t)
	if r := result(t, third.call(map[string]any{"op": "hold", "hold": lease["hold"], "ttl_ms": 60000})); r["hold"] != lease["hold"] || r["created_unix_ms"] != lease["created_unix_ms"] {
		t.Fatalf("renewed from another connection: %v, made %v", r, lease)
	}
	for _, id := range []any{lease["hold"], cmd["hold"]} {
		if resp := third.call(map[string]any{"op": "release", "hold": id}); resp["error"] != nil {
			t.Fatalf("release %v: %v", id, resp)
		}
	}
	a.waitHolds(t, 0)
	// Released, the command's hold is gone but the command runs on.
	if resp := third.call(map[string]any{"op": "signal", "stream": cmd["stream"], "signal": "SIGKILL"}); resp["error"] != nil {
		t.Fatalf("the command did not outlive its released hold: %v", resp)
	}
}

// Past --max-hold-seconds a hold stops counting: /v1/traffic lists it
// with counting false, /metrics counts it apart, the sandbox can turn
// idle, and the lease can no longer be renewed.
func TestMaxHoldStopsCounting(t *testing.T) {
	a, clock := newIdleAgent(t)
	if err := a.traffic.Holds().SetMax(30 * time.Minute); err != nil {
		t.Fatal(err)
	}
	rc := a.dial(t)
	lease := result(t, rc.call(map[string]any{"op": "hold", "ttl_ms": 3600000}))
	cmd := result(t, rc.call(map[string]any{"op": "exec", "argv": []string{"sleep", "1000"}, "keep_awake": true, "attach": false}))
	defer rc.call(map[string]any{"op": "signal", "stream": cmd["stream"], "signal": "SIGKILL"})
	_, metrics := a.get(t, "/metrics")
	if !strings.Contains(string(metrics), "\nrayito_holds 2\n") || !strings.Contains(string(metrics), "\nrayito_holds_past_max 0\n") {
		t.Fatalf("metrics with two holds:\n%s", metrics)
	}
	clock.Advance(30 * time.Minute)
	s := a.trafficState(t)
	if len(s.Holds) != 2 || s.Holds[0].Counting || s.Holds[1].Counting {
		t.Fatalf("holds past the maximum: %+v", s.Holds)
	}
	_, metrics = a.get(t, "/metrics")
	if !strings.Contains(string(metrics), "\nrayito_holds 0\n") || !strings.Contains(string(metrics), "\nrayito_holds_past_max 2\n") {
		t.Fatalf("metrics with two holds past the maximum:\n%s", metrics)
	}
	resp := rc.call(map[string]any{"op": "hold", "hold": lease["hold"], "ttl_ms": 60000})
	if errorCode(resp) != "limit" {
		t.Fatalf("renewing past the maximum: %v", resp)
	}
	clock.Advance(time.Minute)
	if s := a.trafficState(t); !s.Idle || s.IdleMs != 60000 {
		t.Fatalf("not idle a minute after the holds stopped counting: %+v", s)
	}
}

// Bad hold input gets clear errors, and the connection keeps serving.
func TestHoldErrors(t *testing.T) {
	a, _ := newIdleAgent(t)
	rc := a.dial(t)
	cmd := result(t, rc.call(map[string]any{"op": "exec", "argv": []string{"sleep", "1000"}, "keep_awake": true, "attach": false}))
	defer rc.call(map[string]any{"op": "signal", "stream": cmd["stream"], "signal": "SIGKILL"})
	cases := []struct {
		name string
		req  map[string]any
		code string
		says string
	}{
		{"no ttl", map[string]any{"op": "hold"}, "bad_request", "needs ttl_ms"},
		{"negative ttl", map[string]any{"op": "hold", "ttl_ms": -1000}, "bad_request", "ttl_ms must be from 1000"},
		{"zero ttl", map[string]any{"op": "hold", "ttl_ms": 0}, "bad_request", "got 0"},
		{"ttl under a second", map[string]any{"op": "hold", "ttl_ms": 999}, "bad_request", "got 999"},
		{"ttl over an hour", map[string]any{"op": "hold", "ttl_ms": 3600001}, "bad_request", "renew the hold"},
		{"huge ttl", map[string]any{"op": "hold", "ttl_ms": int64(1) << 62}, "bad_request", "got 4611686018427387904"},
		{"ttl beyond int64", map[string]any{"op": "hold", "ttl_ms": 1e30}, "bad_request", "ttl_ms"},
		{"fractional ttl", map[string]any{"op": "hold", "ttl_ms": 1500.5}, "bad_request", "ttl_ms"},
		{"ttl as a string", map[string]any{"op": "hold", "ttl_ms": "30s"}, "bad_request", "ttl_ms"},
		{"empty hold id", map[string]any{"op": "hold", "hold": "", "ttl_ms": 30000}, "bad_request", "leave it out"},
		{"unknown hold", map[string]any{"op": "hold", "hold": "hnope", "ttl_ms": 30000}, "not_found", "hnope"},
		{"hold id a number", map[string]any{"op": "hold", "hold": 5, "ttl_ms": 30000}, "bad_request", "hold"},
		{"renew a stream hold", map[string]any{"op": "hold", "hold": cmd["hold"], "ttl_ms": 30000}, "bad_request", "ends with it"},
		{"release unknown", map[string]any{"op": "release", "hold": "hnope"}, "not_found", "hnope"},
		{"release nothing", map[string]any{"op": "release"}, "bad_request", "needs a hold"},
		{"release a number", map[string]any{"op": "release", "hold": 7}, "bad_request", "hold"},
		{"hold unknown param", map[string]any{"op": "hold", "ttl_ms": 30000, "id_": "x"}, "bad_request", "id_"},
		{"exec keep_awake a string", map[string]any{"op": "exec", "argv": []string{"true"}, "keep_awake": "yes"}, "bad_request", "keep_awake"},
		{"pty keep_awake a number", map[string]any{"op": "pty", "keep_awake": 1}, "bad_request", "keep_awake"},
		{"execute keep_awake a list", map[string]any{"op": "execute", "code": "1", "keep_awake": []int{1}}, "bad_request", "keep_awake"},
	}
	for _, c := range cases {
		resp := rc.call(c.req)
		e, _ := resp["error"].(map[string]any)
		if errorCode(resp) != c.code || e == nil || !strings.Contains(e["message"].(string), c.says) {
			t.Errorf("%s: got %v, want %s saying %q", c.name, resp, c.code, c.says)
			continue
		}
		t.Logf("%s: %s", c.name, e["message"])
	}
	if s := a.trafficState(t); len(s.Holds) != 1 || s.Holds[0].Hold != cmd["hold"] {
		t.Fatalf("bad input changed the holds: %+v", s.Holds)
	}
	if resp := rc.call(map[string]any{"op": "list"}); len(result(t, resp)["streams"].([]any)) != 1 {
		t.Fatalf("bad input started something: %v", resp)
	}
}

// The agent keeps at most traffic.MaxLeases leases and traffic.MaxHolds
// stream holds: beyond, `hold` and keep_awake answer `limit`, and a
// refused keep_awake starts nothing. Leases, many connections' (and
// clients') together, never take a stream's room.
func TestTooManyHolds(t *testing.T) {
	clock := traffictest.NewClock()
	counter := traffic.NewCounterWithClock(clock)
	a := newTestAgentWith(t, counter)
	var rc *rawConn
	var last any
	for i := range traffic.MaxLeases {
		if i%traffic.MaxLeasesPerConn == 0 {
			rc = a.dialFrom(t, fmt.Sprintf("127.0.0.%d", 2+i/traffic.MaxLeasesPerClient))
		}
		last = result(t, rc.call(map[string]any{"op": "hold", "ttl_ms": 60000}))["hold"]
	}
	rc = a.dialFrom(t, "127.0.0.100")
	resp := rc.call(map[string]any{"op": "hold", "ttl_ms": 60000})
	if e, _ := resp["error"].(map[string]any); errorCode(resp) != "limit" || !strings.Contains(fmt.Sprint(e["message"]), "release one") {
		t.Fatalf("a lease beyond the cap: %v", resp)
	}
	cmd := result(t, rc.call(map[string]any{"op": "exec", "argv": []string{"true"}, "keep_awake": true}))
	if cmd["hold"] == nil {
		t.Fatalf("keep_awake while every lease is taken: %v", cmd)
	}
	a.waitHolds(t, traffic.MaxLeases)

	// Every stream hold taken (claimed here without a thousand jobs).
	var rs []*traffic.Reservation
	for range traffic.MaxHolds {
		r, err := counter.Holds().Reserve()
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	for _, req := range []map[string]any{
		{"op": "exec", "argv": []string{"sleep", "1000"}, "keep_awake": true},
		{"op": "pty", "argv": []string{"sleep", "1000"}, "keep_awake": true},
		{"op": "execute", "code": "1", "keep_awake": true},
	} {
		if resp := rc.call(req); errorCode(resp) != "limit" {
			t.Fatalf("%s with keep_awake beyond the cap: %v", req["op"], resp)
		}
	}
	if resp := rc.call(map[string]any{"op": "list"}); len(result(t, resp)["streams"].([]any)) != 1 {
		t.Fatalf("a refused keep_awake started something: %v", resp)
	}
	rs[0].Cancel()
	for _, r := range rs[1:] {
		defer r.Cancel()
	}
	cmd = result(t, rc.call(map[string]any{"op": "exec", "argv": []string{"true"}, "keep_awake": true}))
	if cmd["hold"] == nil {
		t.Fatalf("keep_awake after a slot came free: %v", cmd)
	}
	if resp := rc.call(map[string]any{"op": "release", "hold": last}); resp["error"] != nil {
		t.Fatal(resp)
	}
	result(t, rc.call(map[string]any{"op": "hold", "ttl_ms": 60000}))
}

// Holds are fair: one connection that makes every lease it may is
// refused beyond its share, and another connection still makes leases
// and keep_awake streams.
func TestHoldsFair(t *testing.T) {
	a, _ := newIdleAgent(t)
	greedy := a.dial(t)
	for range traffic.MaxLeasesPerConn {
		result(t, greedy.call(map[string]any{"op": "hold", "ttl_ms": 60000}))
	}
	resp := greedy.call(map[string]any{"op": "hold", "ttl_ms": 60000})
	if e, _ := resp["error"].(map[string]any); errorCode(resp) != "limit" || !strings.Contains(fmt.Sprint(e["message"]), "this connection") {
		t.Fatalf("a lease beyond the connection's share: %v", resp)
	}
	other := a.dial(t)
	result(t, other.call(map[string]any{"op": "hold", "ttl_ms": 60000}))
	cmd := result(t, other.call(map[string]any{"op": "exec", "argv": []string{"sleep", "1000"}, "keep_awake": true, "attach": false}))
	if cmd["hold"] == nil {
		t.Fatalf("keep_awake made no hold: %v", cmd)
	}
	result(t, other.call(map[string]any{"op": "signal", "stream": cmd["stream"], "signal": "SIGKILL"}))
}

// A client's connections together are refused beyond the client's share
// of leases, however many it opens; another client (another address)
// still makes its own.
func TestHoldsFairAcrossConnections(t *testing.T) {
	a, _ := newIdleAgent(t)
	var greedy *rawConn
	for i := range traffic.MaxLeasesPerClient {
		if i%traffic.MaxLeasesPerConn == 0 {
			greedy = a.dialFrom(t, "127.0.0.2")
		}
		result(t, greedy.call(map[string]any{"op": "hold", "ttl_ms": 60000}))
	}
	resp := a.dialFrom(t, "127.0.0.2").call(map[string]any{"op": "hold", "ttl_ms": 60000})
	if e, _ := resp["error"].(map[string]any); errorCode(resp) != "limit" || !strings.Contains(fmt.Sprint(e["message"]), "this client (127.0.0.2)") {
		t.Fatalf("a lease beyond the client's share, on a new connection: %v", resp)
	}
	other := a.dialFrom(t, "127.0.0.3")
	for range traffic.MaxLeasesPerConn {
		result(t, other.call(map[string]any{"op": "hold", "ttl_ms": 60000}))
	}
}
