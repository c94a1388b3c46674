package client_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/rayito/rayito-agent/client"
)

// rawDial opens a bare websocket to the agent, for frames the SDK never
// sends.
func rawDial(t *testing.T, a *agent) *websocket.Conn {
	t.Helper()
	ctx := ctxLong(t)
	ws, _, err := websocket.Dial(ctx, a.url+"/v1/connect", &websocket.DialOptions{
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + testToken}},
		Subprotocols: []string{"rayito.v1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(4 << 20)
	t.Cleanup(func() { ws.CloseNow() })
	if m := rawRead(t, ws); m["event"] != "hello" {
		t.Fatalf("first frame %v", m)
	}
	return ws
}

func rawRead(t *testing.T, ws *websocket.Conn) map[string]any {
	t.Helper()
	_, b, err := ws.Read(ctxLong(t))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	return m
}

func rawCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func TestWrongToken(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	ctx := ctxLong(t)
	if _, err := client.Dial(ctx, a.url, client.Options{Token: "wrong"}); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("dial with a wrong token: %v", err)
	}
	if _, err := client.Dial(ctx, a.url, client.Options{}); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("dial without a token: %v", err)
	}
	resp, err := http.Get(a.http.URL + "/v1/traffic")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("traffic without a token: HTTP %d", resp.StatusCode)
	}
	// The right token still works.
	a.dial(t, client.Options{})
}

// TestBadRequests: each bad request gets its documented error, and the
// agent keeps serving the same and other clients.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	c := a.dial(t, client.Options{})
	ctx := ctxLong(t)
	sleeper, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Signal(ctx, client.SIGKILL); sleeper.Wait(ctx) })
	other := a.dial(t, client.Options{})

	sdk := []struct {
		name string
		call func() error
		code client.Code
	}{
		{"missing cwd", func() error {
			_, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"true"}, Cwd: "/does/not/exist"})
			return err
		}, client.CodeBadRequest},
		{"missing user", func() error {
			_, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"true"}, User: "no-such-user-here"})
			return err
		}, client.CodeBadRequest},
		{"missing program", func() error {
			_, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"/no/such/program"}})
			return err
		}, client.CodeBadRequest},
		{"bad overflow", func() error {
			_, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"true"}, Overflow: "sideways"})
			return err
		}, client.CodeBadRequest},
		{"bad signal name", func() error { return sleeper.Signal(ctx, "SIGFOO") }, client.CodeBadRequest},
		{"unknown stream", func() error {
			_, err := c.Attach(ctx, client.AttachOptions{Stream: 987654})
			return err
		}, client.CodeNotFound},
		{"unknown tag", func() error {
			_, err := c.Attach(ctx, client.AttachOptions{Tag: "nobody"})
			return err
		}, client.CodeNotFound},
		{"already attached", func() error {
			_, err := c.Attach(ctx, client.AttachOptions{Stream: sleeper.Stream()})
			return err
		}, client.CodeConflict},
		{"cursor ahead", func() error {
			_, err := other.Attach(ctx, client.AttachOptions{Stream: sleeper.Stream(), From: map[string]uint64{"stdout": 1 << 40}})
			return err
		}, client.CodeBadRequest},
	}
	for _, tc := range sdk {
		if err := tc.call(); !client.HasCode(err, tc.code) {
			t.Errorf("%s: %v, want code %s", tc.name, err, tc.code)
		}
	}

	ws := rawDial(t, a)
	raw := []struct {
		name, frame, code string
	}{
		{"malformed JSON", `{"id": 1, "op": `, "bad_request"},
		{"unknown op", `{"id": 2, "op": "frobnicate"}`, "bad_request"},
		{"unknown parameter", `{"id": 3, "op": "list", "kinds": "x"}`, "bad_request"},
		{"signal unknown stream", `{"id": 4, "op": "signal", "stream": 987654, "signal": "SIGTERM"}`, "not_found"},
		{"not an object", `[1, 2]`, "bad_request"},
	}
	for _, tc := range raw {
		if err := ws.Write(ctx, websocket.MessageText, []byte(tc.frame)); err != nil {
			t.Fatal(err)
		}
		if m := rawRead(t, ws); rawCode(m) != tc.code {
			t.Errorf("%s: got %v, want code %s", tc.name, m, tc.code)
		}
	}
	// A binary frame the protocol does not allow: an OUT frame from a client.
	if err := ws.Write(ctx, websocket.MessageBinary, []byte{0x01, 0x01, 0x01, 0x00, 'x'}); err != nil {
		t.Fatal(err)
	}
	if m := rawRead(t, ws); m["event"] != "error" || rawCode(m) != "bad_request" {
		t.Errorf("OUT frame from a client: %v", m)
	}

	// Oversized: more than 1 MiB plus a header closes that connection
	// with 1009.
	big := make([]byte, 1<<20+64)
	big[0], big[1], big[2] = 0x02, 0x01, 0x00
	ws2 := rawDial(t, a)
	ws2.Write(ctx, websocket.MessageBinary, big)
	if _, _, err := ws2.Read(ctx); websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("oversized frame: %v, want close 1009", err)
	}

	// Everyone else is still served: the first raw connection, the SDK
	// client, and a new client.
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"id": 9, "op": "list"}`)); err != nil {
		t.Fatal(err)
	}
	if m := rawRead(t, ws); m["result"] == nil {
		t.Fatalf("list after bad frames: %v", m)
	}
	for _, cl := range []*client.Client{c, a.dial(t, client.Options{})} {
		if r := run(t, cl, client.ExecOptions{Argv: []string{"echo", "still"}}); string(r.stdout) != "still\n" || r.err != nil {
			t.Fatalf("exec after bad input: %q %v", r.stdout, r.err)
		}
	}
}

// TestOversizedRequest: a request over the agent's control frame limit
// (an exec with megabytes of arguments) fails with CodeLimit before it is
// sent; the connection, and the streams on it, carry on.
func TestOversizedRequest(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{DisableReconnect: true})
	ctx := ctxLong(t)
	p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"sh", "-c", "read x; echo got $x"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{"true"}
	for range 2000 {
		argv = append(argv, strings.Repeat("a", 1000))
	}
	if _, err := c.Exec(ctx, client.ExecOptions{Argv: argv}); !client.HasCode(err, client.CodeLimit) || !strings.Contains(err.Error(), "not sent") {
		t.Fatalf("exec with 2 MB of arguments: %v, want a limit error", err)
	}
	if _, err := p.Write([]byte("x\n")); err != nil {
		t.Fatalf("stdin after the refused request: %v", err)
	}
	if out, err := io.ReadAll(p.Stdout()); err != nil || string(out) != "got x\n" {
		t.Fatalf("output %q, %v", out, err)
	}
	if _, err := c.List(ctx, "none"); err != nil {
		t.Fatalf("a request after the refused one: %v", err)
	}
}
