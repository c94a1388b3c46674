package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// These tests hold the endpoint to docs/protocol.md where an earlier
// review found it doing something else.

// TestAckErrorEventsNameTheStream: an ack has no response, so its error
// event must say which stream it concerns (section 11.1).
func TestAckErrorEventsNameTheStream(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	id := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"sleep", "30"}}))
	t.Cleanup(func() { rc.call(map[string]any{"op": "signal", "stream": id, "signal": "SIGKILL"}) })
	cases := []struct {
		name   string
		ack    map[string]any
		stream uint64
		code   string
	}{
		{"beyond what was sent", map[string]any{"op": "ack", "stream": id, "cursors": map[string]any{"stdout": 5}}, id, "bad_request"},
		{"unknown channel", map[string]any{"op": "ack", "stream": id, "cursors": map[string]any{"pty": 0}}, id, "bad_request"},
		{"unknown stream", map[string]any{"op": "ack", "stream": 999999, "cursors": map[string]any{"stdout": 0}}, 999999, "not_found"},
	}
	for _, c := range cases {
		rc.send(c.ack)
		m := rc.readControl()
		if m["event"] != "error" || errorCode(m) != c.code {
			t.Fatalf("%s: got %v, want an error event %s", c.name, m, c.code)
		}
		if s, _ := m["stream"].(float64); uint64(s) != c.stream {
			t.Errorf("%s: error event %v does not name stream %d", c.name, m, c.stream)
		}
	}
}

// TestDetachAnswersBeforeItsEnd: detach answers {}, then the attachment
// gets `end` (section 11.2), every time.
func TestDetachAnswersBeforeItsEnd(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	id := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"sleep", "60"}, "attach": false}))
	t.Cleanup(func() { rc.call(map[string]any{"op": "signal", "stream": id, "signal": "SIGKILL"}) })
	for i := 0; i < 300; i++ {
		if r := rc.call(map[string]any{"op": "attach", "stream": id}); r["result"] == nil {
			t.Fatalf("attach %d: %v", i, r)
		}
		detach := rc.send(map[string]any{"op": "detach", "stream": id})
		answered := false
		for {
			m := rc.readControl()
			if v, ok := m["id"].(float64); ok && uint64(v) == detach {
				if m["result"] == nil {
					t.Fatalf("detach %d: %v", i, m)
				}
				answered = true
				continue
			}
			if m["event"] == "end" && uint64(m["stream"].(float64)) == id {
				if !answered {
					t.Fatalf("round %d: end %v came before the detach response", i, m)
				}
				if m["reason"] != "closed" || m["message"] != "detached" {
					t.Fatalf("round %d: end %v", i, m)
				}
				break
			}
		}
	}
}

// fillAttachments attaches rc to as many streams as a connection may hold.
// The streams are the registry's own, created directly: 4,096 processes
// would only slow the test down.
func fillAttachments(t *testing.T, a *testAgent, rc *rawConn) {
	const batch = 128
	for n := 0; n < maxAttachments; n += batch {
		first := rc.next + 1
		for k := 0; k < batch && n+k < maxAttachments; k++ {
			st := a.streams.Create(stream.Config{Kind: stream.KindCell, Channels: []stream.ChannelSpec{{Name: "events", Unit: stream.Events, Policy: stream.Drop}}})
			rc.send(map[string]any{"op": "attach", "stream": st.ID})
		}
		for id := first; id <= rc.next; id++ {
			if r := rc.response(id); r["result"] == nil {
				t.Fatalf("attachment %d: %v", n+int(id-first), r)
			}
		}
	}
}

func streamsOfKind(t *testing.T, rc *rawConn, kind string) []any {
	r := rc.call(map[string]any{"op": "list", "kind": kind})
	res, ok := r["result"].(map[string]any)
	if !ok {
		t.Fatalf("list: %v", r)
	}
	return res["streams"].([]any)
}

// TestCreateBeyondAttachmentLimitStartsNothing: an op that would attach
// the caller beyond its limit is refused before it starts anything; a
// client told `limit` must not find the command running anyway.
func TestCreateBeyondAttachmentLimitStartsNothing(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	fillAttachments(t, a, rc)
	marker := filepath.Join(t.TempDir(), "ran")
	for _, req := range []map[string]any{
		{"op": "exec", "argv": []string{"touch", marker}},
		{"op": "pty", "argv": []string{"touch", marker}},
		{"op": "watch", "path": t.TempDir()},
	} {
		if r := rc.call(req); errorCode(r) != "limit" {
			t.Fatalf("%v at the limit: %v, want limit", req["op"], r)
		}
	}
	for _, kind := range []string{"process", "pty", "watch"} {
		if got := streamsOfKind(t, rc, kind); len(got) != 0 {
			t.Errorf("refused with limit, yet %s streams exist: %v", kind, got)
		}
	}
	// Without attaching, creating still works.
	id := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"touch", marker}, "attach": false}))
	rc2 := a.dial(t)
	if r := rc2.call(map[string]any{"op": "attach", "stream": id}); r["result"] == nil {
		t.Fatalf("attach from another connection: %v", r)
	}
	if _, end := rc2.collect(id); end["exit_code"] != 0.0 {
		t.Fatalf("end %v", end)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the unattached exec did not run: %v", err)
	}
}

// TestCreateWhileResumeCutsStartsNothing: once a resume is closing a
// connection, a request read from it is never run (and never answered):
// a client that sends it again after reconnecting must not run the
// command twice.
func TestCreateWhileResumeCutsStartsNothing(t *testing.T) {
	a := newTestAgent(t)
	a.dial(t)
	sessions := a.srv.Sessions()
	if len(sessions) != 1 {
		t.Fatalf("%d sessions", len(sessions))
	}
	// The state a resume's Cut puts a session in before it closes it.
	ss := sessions[0]
	ss.stopTaking()
	ss.handleControl([]byte(`{"id": 1, "op": "exec", "argv": ["true"]}`))
	ss.mu.Lock()
	inflight := ss.inflight
	ss.mu.Unlock()
	if inflight != 0 {
		t.Fatalf("a request read during a resume cut was taken (%d in flight)", inflight)
	}
	if got := streamsOfKind(t, a.dial(t), "process"); len(got) != 0 {
		t.Fatalf("refused, yet a process was started: %v", got)
	}
}

// TestOversizedFramesClose1009: a control frame over 1 MiB, or a data
// frame with more than 1 MiB of payload, closes the connection with 1009
// (section 2), even when the whole message is within the read limit that
// leaves room for a data frame's header.
func TestOversizedFramesClose1009(t *testing.T) {
	a := newTestAgent(t)
	frames := map[string]struct {
		typ websocket.MessageType
		msg []byte
	}{
		"control": {websocket.MessageText, []byte(`{"id":1,"op":"list","pad":"` + strings.Repeat("x", wire.MaxControl+1-29) + `"}`)},
		"data":    {websocket.MessageBinary, wire.AppendData(nil, wire.Data{Type: wire.In, Stream: 1, Payload: make([]byte, wire.MaxPayload+1)})},
	}
	for name, f := range frames {
		if len(f.msg) > wire.MaxMessage || (f.typ == websocket.MessageText && len(f.msg) != wire.MaxControl+1) {
			t.Fatalf("%s frame of %d bytes does not test the edge", name, len(f.msg))
		}
		rc := a.dial(t)
		rc.sendRaw(f.typ, f.msg)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var err error
		for err == nil {
			_, _, err = rc.c.Read(ctx)
		}
		cancel()
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.StatusMessageTooBig {
			t.Errorf("%s frame of %d bytes: %v, want close 1009", name, len(f.msg), err)
		}
	}
}

// TestResponsePrecedesStreamData: the response announcing a stream comes
// before any frame of that stream, for every stream of a busy connection.
func TestResponsePrecedesStreamData(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	const rounds, batch = 8, 32
	for r := 0; r < rounds; r++ {
		pending := map[uint64]bool{}
		for k := 0; k < batch; k++ {
			pending[rc.send(map[string]any{"op": "exec", "argv": []string{"echo", "hi"}})] = true
		}
		announced := map[uint64]bool{}
		ended := 0
		for ended < batch {
			m, d := rc.read()
			if d != nil {
				if !announced[d.Stream] {
					t.Fatalf("data of stream %d before the response that announces it", d.Stream)
				}
				continue
			}
			if v, ok := m["id"].(float64); ok && pending[uint64(v)] {
				announced[resultStream(t, m)] = true
				continue
			}
			if s, ok := m["stream"].(float64); ok {
				if !announced[uint64(s)] {
					t.Fatalf("%v before the response that announces stream %d", m, uint64(s))
				}
				if m["event"] == "end" {
					ended++
				}
			}
		}
	}
}

// TestInitRejectsNULInEnvValue: /v1/init validates before it changes
// anything (section 11.7); a value no process can be given is a 400, not
// a default that makes every later exec fail.
func TestInitRejectsNULInEnvValue(t *testing.T) {
	a := newTestAgent(t)
	if status, m := a.post(t, "/v1/init", testToken, `{"env": {"GOOD": "x\u0000y"}}`); status != http.StatusBadRequest || m["error"] == nil {
		t.Fatalf("init with a NUL in an env value: %d %v, want 400", status, m)
	}
	rc := a.dial(t)
	id := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"true"}}))
	if _, end := rc.collect(id); end["exit_code"] != 0.0 {
		t.Fatalf("exec after a refused init: %v", end)
	}
}

// TestHTTPErrorsAreJSON: every HTTP error has the body
// {"error": {"code", "message"}} (section 11.1), unknown routes and wrong
// methods included.
func TestHTTPErrorsAreJSON(t *testing.T) {
	a := newTestAgent(t)
	cases := []struct {
		method, path string
		status       int
	}{
		{"GET", "/nope", http.StatusNotFound},
		{"GET", "/v1", http.StatusNotFound},
		{"POST", "/health", http.StatusMethodNotAllowed},
		{"GET", "/v1/init", http.StatusMethodNotAllowed},
		{"DELETE", "/v1/resume", http.StatusMethodNotAllowed},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, a.http.URL+c.path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error *wire.Error `json:"error"`
		}
		derr := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != c.status || derr != nil || body.Error == nil || body.Error.Code == "" {
			t.Errorf("%s %s: %d %+v (%v), want %d with a JSON error", c.method, c.path, resp.StatusCode, body, derr, c.status)
		}
	}
}

// TestFirstInitSetsTheTokenOnce: of several first calls racing to set the
// token, one wins; the others are later calls and need its token.
func TestFirstInitSetsTheTokenOnce(t *testing.T) {
	for round := 0; round < 20; round++ {
		a := newTestAgentWithToken(t, "")
		const n = 16
		statuses := make([]int, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				body := `{"default_user": "root", "default_cwd": "/tmp", "access_token": "tok-` + strconv.Itoa(i) + `"}`
				resp, err := http.Post(a.http.URL+"/v1/init", "application/json", strings.NewReader(body))
				if err != nil {
					return
				}
				resp.Body.Close()
				statuses[i] = resp.StatusCode
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for _, s := range statuses {
			if s == http.StatusOK {
				won++
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d first calls set the token (statuses %v)", round, won, statuses)
		}
	}
}
