package endpoint

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/surface/surfacetest"
	"github.com/rayito/rayito-agent/internal/traffic"
	"github.com/rayito/rayito-agent/internal/wire"
)

const testToken = "test-token"

var (
	reaperOnce sync.Once
	reaper     *proc.Reaper
)

func testReaper(t testing.TB) *proc.Reaper {
	reaperOnce.Do(func() {
		r, err := proc.NewReaper()
		if err != nil {
			t.Fatal(err)
		}
		reaper = r
	})
	return reaper
}

type testAgent struct {
	srv      *Server
	kit      *surface.Server
	auth     *surface.Auth
	surfaces []surface.Surface
	http     *httptest.Server
	streams  *stream.Registry
	traffic  *traffic.Counter
	defaults *proc.Defaults
	resume   *resume.Manager
	url      string
}

// newTestAgent serves a real agent in this process; limits, if given,
// bound its retention.
func newTestAgent(t testing.TB, limits ...stream.Limits) *testAgent {
	return newTestAgentWith(t, traffic.NewCounter(), limits...)
}

// newTestAgentWithToken serves an agent whose token is token; "" makes
// one without a token (the first /v1/init may then set one).
func newTestAgentWithToken(t testing.TB, token string) *testAgent {
	return buildTestAgent(t, traffic.NewCounter(), token, stream.Limits{})
}

// newTestAgentWith builds an agent around counter (one on a settable clock,
// for tests of idleness).
func newTestAgentWith(t testing.TB, counter *traffic.Counter, limits ...stream.Limits) *testAgent {
	return buildTestAgent(t, counter, testToken, append(limits, stream.Limits{})[0])
}

func buildTestAgent(t testing.TB, counter *traffic.Counter, token string, limits stream.Limits) *testAgent {
	a := BuildAgentForTests(t, AgentForTestsOptions{Reaper: testReaper(t), Counter: counter, Token: token, Limits: limits})
	return &testAgent{srv: a.Native, kit: a.Kit, auth: a.Auth, surfaces: a.Surfaces, http: a.HTTP, streams: a.Streams,
		traffic: counter, defaults: a.Defaults, resume: a.Resume, url: "ws" + a.HTTP.URL[len("http"):]}
}

// serveNative serves the native surface of srv alone, with the test
// token, on a test HTTP server; at cleanup it shuts it down, then runs
// closeAll.
func serveNative(t testing.TB, srv *Server, closeAll func()) *httptest.Server {
	kit := surface.New(surface.Options{Auth: surface.NewAuth(testToken)})
	kit.Mount(srv.Surface())
	return surfacetest.Serve(t, kit.Handler(), kit.Shutdown, closeAll)
}

// rawConn is a bare websocket client that speaks frames, for testing the
// endpoint without the SDK.
type rawConn struct {
	t     testing.TB
	c     *websocket.Conn
	next  uint64
	hello map[string]any
}

func (a *testAgent) dial(t testing.TB) *rawConn { return a.dialFrom(t, "") }

// dialFrom connects from a loopback address of its own (127.0.0.2, ...;
// "" for the default): another client, as the agent tells them apart.
func (a *testAgent) dialFrom(t testing.TB, from string) *rawConn {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var opts *websocket.DialOptions
	if from != "" {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		opts = &websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}}
	}
	c, _, err := websocket.Dial(ctx, a.url+"/v1/connect?access_token="+testToken, opts)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(wire.MaxMessage)
	t.Cleanup(func() { c.CloseNow() })
	rc := &rawConn{t: t, c: c}
	if rc.hello = rc.readControl(); rc.hello["event"] != "hello" {
		t.Fatalf("first frame is not hello: %v", rc.hello)
	}
	return rc
}

func (rc *rawConn) send(v map[string]any) uint64 {
	rc.next++
	v["id"] = rc.next
	b, _ := json.Marshal(v)
	rc.sendRaw(websocket.MessageText, b)
	return rc.next
}

func (rc *rawConn) sendRaw(typ websocket.MessageType, b []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rc.c.Write(ctx, typ, b); err != nil {
		rc.t.Fatal(err)
	}
}

// read returns the next frame: a decoded control frame or a data frame.
func (rc *rawConn) read() (map[string]any, *wire.Data) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	typ, b, err := rc.c.Read(ctx)
	if err != nil {
		rc.t.Fatalf("read: %v", err)
	}
	if typ == websocket.MessageBinary {
		d, err := wire.DecodeData(b)
		if err != nil {
			rc.t.Fatal(err)
		}
		return nil, &d
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		rc.t.Fatal(err)
	}
	return m, nil
}

func (rc *rawConn) readControl() map[string]any {
	for {
		m, _ := rc.read()
		if m != nil {
			return m
		}
	}
}

// response waits for the response to id, skipping anything else.
func (rc *rawConn) response(id uint64) map[string]any {
	for {
		m := rc.readControl()
		if v, ok := m["id"].(float64); ok && uint64(v) == id {
			return m
		}
	}
}

func (rc *rawConn) call(v map[string]any) map[string]any {
	return rc.response(rc.send(v))
}

// collect reads a stream's output until its end event.
func (rc *rawConn) collect(stream uint64) (map[string][]byte, map[string]any) {
	return rc.collectFrom(stream, 0)
}

// collectFrom is collect for an attachment whose stdout starts at from.
func (rc *rawConn) collectFrom(stream, from uint64) (map[string][]byte, map[string]any) {
	out := map[string][]byte{}
	base := map[string]uint64{"stdout": from}
	for {
		m, d := rc.read()
		if d != nil && d.Stream == stream {
			name := wire.ChannelName(d.Channel)
			if base[name]+uint64(len(out[name])) != d.Offset {
				rc.t.Fatalf("%s: offset %d after %d bytes", name, d.Offset, len(out[name]))
			}
			out[name] = append(out[name], d.Payload...)
			continue
		}
		if m != nil && m["event"] == "end" && uint64(m["stream"].(float64)) == stream {
			return out, m
		}
	}
}

func errorCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	if e == nil {
		return ""
	}
	return e["code"].(string)
}

func resultStream(t testing.TB, m map[string]any) uint64 {
	r, ok := m["result"].(map[string]any)
	if !ok {
		t.Fatalf("no result: %v", m)
	}
	return uint64(r["stream"].(float64))
}

func TestMain(m *testing.M) { os.Exit(m.Run()) }

// result is a response's result, failing the test on an error response.
func result(t *testing.T, resp map[string]any) map[string]any {
	t.Helper()
	r, ok := resp["result"].(map[string]any)
	if !ok {
		t.Fatalf("no result: %v", resp)
	}
	return r
}
