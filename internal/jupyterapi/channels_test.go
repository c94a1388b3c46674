package jupyterapi_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/stream"
)

// wsClient is a bare kernel websocket client with its own framing code,
// independent of the server's.
type wsClient struct {
	t       testing.TB
	c       *websocket.Conn
	v1      bool
	session string
	n       int
}

// msg is a kernel message as a client sees it.
type msg struct {
	Channel string          `json:"channel"`
	Header  map[string]any  `json:"header"`
	Parent  map[string]any  `json:"parent_header"`
	Meta    map[string]any  `json:"metadata"`
	Content json.RawMessage `json:"content"`
}

func (m msg) msgType() string  { s, _ := m.Header["msg_type"].(string); return s }
func (m msg) parentID() string { s, _ := m.Parent["msg_id"].(string); return s }

// clientCount makes session ids, and so msg_ids, unique across clients.
var clientCount atomic.Int64

func (a *agent) dialKernel(t testing.TB, kernelID string, offerV1 bool) *wsClient {
	t.Helper()
	return a.dialSession(t, kernelID, fmt.Sprintf("%s-%d", t.Name(), clientCount.Add(1)), offerV1)
}

// dialSession opens a kernel websocket of the given session: a client
// reconnecting names its session again.
func (a *agent) dialSession(t testing.TB, kernelID, session string, offerV1 bool) *wsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	opts := &websocket.DialOptions{}
	if offerV1 {
		opts.Subprotocols = []string{"v1.kernel.websocket.jupyter.org"}
	}
	u := "ws" + strings.TrimPrefix(a.url, "http") + "api/kernels/" + kernelID + "/channels?session_id=" + session + "&token=" + testToken
	c, _, err := websocket.Dial(ctx, u, opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.SetReadLimit(64 << 20)
	t.Cleanup(func() { c.CloseNow() })
	return &wsClient{t: t, c: c, v1: c.Subprotocol() == "v1.kernel.websocket.jupyter.org", session: session}
}

// send sends a request and returns its msg_id.
func (w *wsClient) send(channel, msgType string, content any) string {
	w.t.Helper()
	w.n++
	id := fmt.Sprintf("%s-%d", w.session, w.n)
	header := map[string]any{"msg_id": id, "msg_type": msgType, "session": w.session, "username": "test", "version": "5.3", "date": time.Now().UTC().Format(time.RFC3339)}
	body, _ := json.Marshal(content)
	w.sendRaw(channel, header, body)
	return id
}

func (w *wsClient) sendRaw(channel string, header map[string]any, content []byte) {
	w.t.Helper()
	h, _ := json.Marshal(header)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var err error
	if w.v1 {
		err = w.c.Write(ctx, websocket.MessageBinary, v1Frame([]byte(channel), h, []byte("{}"), []byte("{}"), content))
	} else {
		m, _ := json.Marshal(map[string]any{"channel": channel, "header": json.RawMessage(h), "parent_header": map[string]any{}, "metadata": map[string]any{}, "content": json.RawMessage(content)})
		err = w.c.Write(ctx, websocket.MessageText, m)
	}
	if err != nil {
		w.t.Fatalf("write: %v", err)
	}
}

func v1Frame(parts ...[]byte) []byte {
	n := len(parts) + 1
	out := make([]byte, 8*(n+1))
	binary.LittleEndian.PutUint64(out, uint64(n))
	off := len(out)
	for i, p := range parts {
		binary.LittleEndian.PutUint64(out[8*(i+1):], uint64(off))
		off += len(p)
	}
	binary.LittleEndian.PutUint64(out[8*n:], uint64(off))
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// next reads one message.
func (w *wsClient) next() msg {
	w.t.Helper()
	m, err := w.read()
	if err != nil {
		w.t.Fatalf("read: %v", err)
	}
	return m
}

func (w *wsClient) read() (msg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	typ, data, err := w.c.Read(ctx)
	if err != nil {
		return msg{}, err
	}
	var m msg
	switch {
	case w.v1:
		if typ != websocket.MessageBinary {
			return m, fmt.Errorf("v1 frame of type %v", typ)
		}
		n := binary.LittleEndian.Uint64(data)
		offs := make([]uint64, n)
		for i := range offs {
			offs[i] = binary.LittleEndian.Uint64(data[8*(i+1):])
		}
		if offs[n-1] != uint64(len(data)) {
			return m, fmt.Errorf("last offset %d, frame %d bytes", offs[n-1], len(data))
		}
		part := func(i int) []byte { return data[offs[i]:offs[i+1]] }
		m.Channel = string(part(0))
		for i, dst := range []any{&m.Header, &m.Parent, &m.Meta, &m.Content} {
			if err := json.Unmarshal(part(i+1), dst); err != nil {
				return m, fmt.Errorf("part %d: %v", i+1, err)
			}
		}
	case typ == websocket.MessageText:
		if err := json.Unmarshal(data, &m); err != nil {
			return m, err
		}
	default:
		return m, fmt.Errorf("legacy binary frame without buffers")
	}
	return m, nil
}

// until reads until a message matches, returning everything read.
func (w *wsClient) until(match func(msg) bool) []msg {
	w.t.Helper()
	var seen []msg
	for {
		m := w.next()
		seen = append(seen, m)
		if match(m) {
			return seen
		}
	}
}

func isReply(id, msgType string) func(msg) bool {
	return func(m msg) bool { return m.parentID() == id && m.msgType() == msgType }
}

func executeContent(code string) map[string]any {
	return map[string]any{"code": code, "silent": false, "store_history": true, "user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": true}
}

func TestWebsocketFanOut(t *testing.T) {
	t.Parallel()
	a := newAgent(t, false)
	k := a.startKernel(t)
	wa, wb := a.dialKernel(t, k.UUID(), true), a.dialKernel(t, k.UUID(), true)
	if !wa.v1 || !wb.v1 {
		t.Fatal("the v1 subprotocol was not selected")
	}
	// Both are ready once each has its own kernel_info_reply.
	for _, w := range []*wsClient{wa, wb} {
		id := w.send("shell", "kernel_info_request", map[string]any{})
		w.until(isReply(id, "kernel_info_reply"))
	}
	if n := k.Connections(); n != 2 {
		t.Fatalf("connections %d with two websockets", n)
	}
	id := wa.send("shell", "execute_request", executeContent("fan = 6 * 7\nfan"))
	var result string
	var replied, idle bool
	for !replied || !idle {
		m := wa.next()
		if m.parentID() != id {
			continue
		}
		switch m.msgType() {
		case "execute_reply":
			replied = true
		case "execute_result":
			var c struct{ Data map[string]string }
			json.Unmarshal(m.Content, &c)
			result = c.Data["text/plain"]
		case "status":
			idle = strings.Contains(string(m.Content), "idle")
		}
	}
	if result != "42" {
		t.Fatalf("sender: result %q", result)
	}
	// The other websocket saw the iopub, and not the sender's reply.
	seen := wb.until(func(m msg) bool { return m.parentID() == id && m.msgType() == "execute_result" })
	probe := wb.send("shell", "kernel_info_request", map[string]any{})
	seen = append(seen, wb.until(isReply(probe, "kernel_info_reply"))...)
	for _, m := range seen {
		if m.Channel == "shell" && m.parentID() == id {
			t.Fatalf("the other websocket got the sender's %s", m.msgType())
		}
	}
}

func TestWebsocketLegacyFraming(t *testing.T) {
	t.Parallel()
	a := newAgent(t, false)
	k := a.startKernel(t)
	w := a.dialKernel(t, k.UUID(), false) // offers nothing: legacy JSON
	if w.v1 || w.c.Subprotocol() != "" {
		t.Fatalf("subprotocol %q selected for a client that offered none", w.c.Subprotocol())
	}
	id := w.send("shell", "execute_request", executeContent("print('legacy')"))
	var out string
	for _, m := range w.until(isReply(id, "execute_reply")) {
		if m.parentID() == id && m.msgType() == "stream" {
			var c struct{ Text string }
			json.Unmarshal(m.Content, &c)
			out += c.Text
		}
	}
	// Stream output may arrive after the reply; wait for idle.
	for !strings.Contains(out, "legacy") {
		m := w.next()
		if m.parentID() == id && m.msgType() == "stream" {
			var c struct{ Text string }
			json.Unmarshal(m.Content, &c)
			out += c.Text
		}
	}
}

func TestWebsocketBadFramesAreDropped(t *testing.T) {
	t.Parallel()
	a := newAgent(t, false)
	k := a.startKernel(t)
	w := a.dialKernel(t, k.UUID(), true)
	ctx := context.Background()
	for _, bad := range [][]byte{
		{1, 2, 3},
		v1Frame([]byte("shell"), []byte("not json"), []byte("{}"), []byte("{}"), []byte("{}")),
		v1Frame([]byte("iopub"), []byte(`{"msg_type":"status"}`), []byte("{}"), []byte("{}"), []byte("{}")),
		v1Frame([]byte("shell"), []byte(`{}`), []byte("{}"), []byte("{}"), []byte("{}")), // no msg_type
		binary.LittleEndian.AppendUint64(nil, 1<<40),
	} {
		if err := w.c.Write(ctx, websocket.MessageBinary, bad); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.c.Write(ctx, websocket.MessageText, []byte(`{"channel":"shell"}`)); err != nil {
		t.Fatal(err)
	}
	// The connection and the kernel still work.
	id := w.send("shell", "kernel_info_request", map[string]any{})
	w.until(isReply(id, "kernel_info_reply"))
}

func TestWebsocketClosesWhenKernelShutDown(t *testing.T) {
	t.Parallel()
	a := newAgent(t, false)
	k := a.startKernel(t)
	w := a.dialKernel(t, k.UUID(), true)
	if err := a.kernels.Shutdown(context.Background(), k.ID()); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := w.read(); err != nil {
			if code := websocket.CloseStatus(err); code != websocket.StatusNormalClosure {
				t.Fatalf("closed with %v (%v), want 1000", code, err)
			}
			return
		}
	}
}

func TestResumeClosesWebsocketsWith1012(t *testing.T) {
	t.Parallel()
	a := newAgent(t, false)
	k := a.startKernel(t)
	w := a.dialKernel(t, k.UUID(), true)
	id := w.send("shell", "execute_request", executeContent("kept = 'across the resume'"))
	w.until(isReply(id, "execute_reply"))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a.resume(ctx)
	for {
		if _, err := w.read(); err != nil {
			if code := websocket.CloseStatus(err); code != 1012 {
				t.Fatalf("closed with %v (%v), want 1012", code, err)
			}
			break
		}
	}
	// The cut websocket's relay waits for the session's next websocket;
	// the client is no longer connected meanwhile.
	eventually(t, "the kernel model says 0 connections", func() bool { return a.connections(t, k.UUID()) == 0 })
	// The client reconnects with its session and finds its kernel as it
	// was, through the relay it had: one connection, not two.
	w = a.dialSession(t, k.UUID(), w.session, true)
	if n := k.Connections(); n != 1 {
		t.Fatalf("%d relays after the reconnect, want the parked one taken over", n)
	}
	id = w.send("shell", "execute_request", executeContent("kept"))
	var result string
	for _, m := range w.until(isReply(id, "execute_reply")) {
		if m.parentID() == id && m.msgType() == "execute_result" {
			result = string(m.Content)
		}
	}
	for result == "" {
		if m := w.next(); m.parentID() == id && m.msgType() == "execute_result" {
			result = string(m.Content)
		}
	}
	if !strings.Contains(result, "across the resume") {
		t.Fatalf("after the resume: %s", result)
	}
}

// A client that reconnects before the agent noticed its old websocket
// close (a network that dropped silently) replaces it: the old one is
// closed and its requests in flight answer on the new one.
func TestReconnectReplacesStaleWebsocket(t *testing.T) {
	t.Parallel()
	a := newAgent(t, false)
	k := a.startKernel(t)
	old := a.dialKernel(t, k.UUID(), true)
	// The cell prints once the test says so: after the replacement.
	gate := filepath.Join(t.TempDir(), "go")
	id := old.send("shell", "execute_request", executeContent(fmt.Sprintf(
		"import os, time\nwhile not os.path.exists(%q): time.sleep(0.01)\nprint('late')", gate)))
	old.until(func(m msg) bool { return m.msgType() == "status" && m.parentID() == id })

	w := a.dialSession(t, k.UUID(), old.session, true)
	if _, err := old.read(); err == nil {
		// Whatever was on its way; the next read finds it closed.
		for err == nil {
			_, err = old.read()
		}
	}
	if n := k.Connections(); n != 1 {
		t.Fatalf("%d relays after the replacement, want 1", n)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var out string
	stream := func(m msg) {
		if m.parentID() == id && m.msgType() == "stream" {
			var c struct{ Text string }
			json.Unmarshal(m.Content, &c)
			out += c.Text
		}
	}
	for _, m := range w.until(isReply(id, "execute_reply")) {
		stream(m)
	}
	// The reply (shell) and the output (iopub) come on sockets of their
	// own, in no fixed order: the output may come after the reply.
	for !strings.Contains(out, "late") {
		stream(w.next())
	}
	if out != "late\n" {
		t.Fatalf("the new websocket got stdout %q of the cell sent on the old one", out)
	}
}

func TestTrafficCounted(t *testing.T) {
	t.Parallel()
	a := newAgent(t, false)
	k := a.startKernel(t)
	before := a.traffic.Snapshot()
	a.do(t, "GET", "api/kernels", "")
	afterREST := a.traffic.Snapshot()
	if afterREST.BytesOut <= before.BytesOut {
		t.Fatalf("REST response not counted: %+v then %+v", before, afterREST)
	}
	w := a.dialKernel(t, k.UUID(), true)
	id := w.send("shell", "kernel_info_request", map[string]any{})
	w.until(isReply(id, "kernel_info_reply"))
	// The agent counts a frame once its write returned, which may be
	// after the client read it.
	eventually(t, "websocket traffic is counted", func() bool {
		during := a.traffic.Snapshot()
		return during.BytesIn > afterREST.BytesIn && during.BytesOut > afterREST.BytesOut && during.Connections == 1
	})
	w.c.Close(websocket.StatusNormalClosure, "")
	eventually(t, "the closed websocket is no longer counted", func() bool { return a.traffic.Snapshot().Connections == 0 })
}

// eventually waits for cond, failing the test if it never holds.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never true: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestShutdownRefusesWebsockets(t *testing.T) {
	t.Parallel()
	a := newAgent(t, false)
	k := a.startKernel(t)
	w := a.dialKernel(t, k.UUID(), true)
	done := make(chan struct{})
	go func() { a.stop(); close(done) }()
	// Messages the kernel sent before the close (its status while it shuts
	// down) may come first: read until the close.
	var err error
	for err == nil {
		_, err = w.read()
	}
	if code := websocket.CloseStatus(err); code != websocket.StatusGoingAway {
		t.Fatalf("closed with %v (%v), want 1001", code, err)
	}
	<-done
	res, body := a.do(t, "GET", "api/kernels/"+k.UUID()+"/channels", "")
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("websocket after Close: %d %s", res.StatusCode, body)
	}
}

// TestWebsocketMessageWaitsForRestart: a message sent while the kernel
// restarts reaches the new process instead of being dropped.
func TestWebsocketMessageWaitsForRestart(t *testing.T) {
	t.Parallel()
	a := newAgent(t, false)
	k := a.startKernel(t)
	w := a.dialKernel(t, k.UUID(), true)
	restarted := make(chan error, 1)
	go func() { restarted <- a.kernels.Restart(context.Background(), k.ID()) }()
	eventually(t, "the kernel is restarting", func() bool { return k.Info().State == jupyter.StateStarting })
	id := w.send("shell", "kernel_info_request", map[string]any{})
	w.until(isReply(id, "kernel_info_reply"))
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
}

// TestWebsocketStdinAndControl: of two websockets on one kernel, only the
// one whose cell asks for input gets the input_request, and its
// input_reply reaches the cell; a control request's reply comes back on
// control, to its sender only.
func TestWebsocketStdinAndControl(t *testing.T) {
	t.Parallel()
	a := newAgent(t, false)
	k := a.startKernel(t)
	wa, wb := a.dialKernel(t, k.UUID(), true), a.dialKernel(t, k.UUID(), true)
	for _, w := range []*wsClient{wa, wb} {
		id := w.send("shell", "kernel_info_request", map[string]any{})
		w.until(isReply(id, "kernel_info_reply"))
	}

	content := executeContent("answer = input('x? ')\nanswer.upper()")
	content["allow_stdin"] = true
	id := wa.send("shell", "execute_request", content)
	asked := wa.until(isReply(id, "input_request"))
	var req struct{ Prompt string }
	if m := asked[len(asked)-1]; m.Channel != "stdin" || json.Unmarshal(m.Content, &req) != nil || req.Prompt != "x? " {
		t.Fatalf("input_request on %q: %s", m.Channel, m.Content)
	}
	wa.send("stdin", "input_reply", map[string]any{"value": "forty-two", "status": "ok"})
	result, replied, idle := "", false, false
	for !replied || !idle {
		m := wa.next()
		if m.parentID() != id {
			continue
		}
		switch m.msgType() {
		case "execute_result":
			var c struct{ Data map[string]string }
			json.Unmarshal(m.Content, &c)
			result = c.Data["text/plain"]
		case "execute_reply":
			replied = true
		case "status":
			idle = strings.Contains(string(m.Content), "idle")
		case "error":
			t.Fatalf("the cell failed: %s", m.Content)
		}
	}
	if result != "'FORTY-TWO'" {
		t.Fatalf("result %q, want the answer upper-cased", result)
	}

	ctl := wa.send("control", "kernel_info_request", map[string]any{})
	got := wa.until(isReply(ctl, "kernel_info_reply"))
	if m := got[len(got)-1]; m.Channel != "control" {
		t.Fatalf("the control request's reply came on %q", m.Channel)
	}

	// The other websocket saw the cell's iopub and neither the input
	// request nor either reply. Everything routed to it before its probe's
	// reply is read by then: the input request and the control reply were
	// delivered before the sender could read them.
	seen := wb.until(func(m msg) bool { return m.parentID() == id && m.msgType() == "execute_result" })
	probe := wb.send("shell", "kernel_info_request", map[string]any{})
	seen = append(seen, wb.until(isReply(probe, "kernel_info_reply"))...)
	for _, m := range seen {
		if m.Channel != "iopub" && (m.parentID() == id || m.parentID() == ctl) {
			t.Fatalf("the other websocket got the sender's %s on %s", m.msgType(), m.Channel)
		}
	}
}

// TestResumeKeepsWebsocketsOpenedUnderItsGeneration: a resume cuts the
// kernel websockets opened before it, not one opened between the
// publication of its generation and its cut, which goes on working.
func TestResumeKeepsWebsocketsOpenedUnderItsGeneration(t *testing.T) {
	t.Parallel()
	a := newAgent(t, false)
	k := a.startKernel(t)
	old := a.dialKernel(t, k.UUID(), true)
	old.until(isReply(old.send("shell", "kernel_info_request", map[string]any{}), "kernel_info_reply"))
	var fresh *wsClient
	a.beforeCut = func() {
		fresh = a.dialKernel(t, k.UUID(), true)
		// Answered: the agent has it registered, for the cut to see.
		fresh.until(isReply(fresh.send("shell", "kernel_info_request", map[string]any{}), "kernel_info_reply"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a.resume(ctx)
	for {
		if _, err := old.read(); err != nil {
			if code := websocket.CloseStatus(err); code != 1012 {
				t.Fatalf("the websocket from before the resume closed with %v (%v), want 1012", code, err)
			}
			break
		}
	}
	id := fresh.send("shell", "execute_request", executeContent("'fresh' * 2"))
	var result string
	for _, m := range fresh.until(isReply(id, "execute_reply")) {
		if m.parentID() == id && m.msgType() == "execute_result" {
			result = string(m.Content)
		}
	}
	for result == "" {
		if m := fresh.next(); m.parentID() == id && m.msgType() == "execute_result" {
			result = string(m.Content)
		}
	}
	if !strings.Contains(result, "freshfresh") {
		t.Fatalf("the websocket opened under the resume's generation answered %s", result)
	}
}

// TestWebsocketAcknowledgesWhatItSent: what a kernel websocket has
// written is acknowledged on its relay, so the relay does not keep the
// kernel's output for it (large outputs kept so crowded cells out of the
// retention budget).
func TestWebsocketAcknowledgesWhatItSent(t *testing.T) {
	t.Parallel()
	a := newAgent(t, false)
	k := a.startKernel(t)
	w := a.dialKernel(t, k.UUID(), true)
	id := w.send("shell", "execute_request", executeContent("'y' * 100000"))
	w.until(isReply(id, "execute_reply"))
	var relays []*stream.Stream
	for _, st := range a.streams.List(stream.KindChannels) {
		if st.Ended() == nil {
			relays = append(relays, st)
		}
	}
	if len(relays) != 1 {
		t.Fatalf("%d running relays, want the websocket's", len(relays))
	}
	log := relays[0].Log(jupyter.EventsChannel)
	eventually(t, "the relay's messages acknowledged", func() bool {
		st := log.Stats()
		return st.End > 0 && st.Acked == st.End
	})
}
