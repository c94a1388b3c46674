package surface

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/rayito/rayito-agent/internal/surface/surfacetest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// rawGet sends a keep-alive GET on c and reads the answer.
func rawGet(c net.Conn, path, token string) (*http.Response, error) {
	req := "GET " + path + " HTTP/1.1\r\nHost: agent\r\n"
	if token != "" {
		req += "Authorization: Bearer " + token + "\r\n"
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

func dialWS(ctx context.Context, addr string) (*websocket.Conn, *http.Response, error) {
	return websocket.Dial(ctx, "ws://"+addr+"/v1/connect?access_token="+testToken, nil)
}

// TestIdleKeepAliveClosed: a keep-alive connection that stays idle is
// closed by the agent, so idle peers cannot pile up.
func TestIdleKeepAliveClosed(t *testing.T) {
	t.Parallel()
	addr := served(t, func(c *Options) { c.IdleTimeout = 300 * time.Millisecond })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if resp, err := rawGet(c, "/health", ""); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/health: %v %v", resp, err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("idle keep-alive connection: read %d, %v; want the agent to close it", n, err)
	}
}

// TestConnectionFloodLeavesRoomForHostAndClients: peers without a token
// that open connection after connection cannot keep /health, the host
// routes or an authenticated client out.
func TestConnectionFloodLeavesRoomForHostAndClients(t *testing.T) {
	t.Parallel()
	addr := served(t, func(c *Options) { c.MaxConns = 8 })
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	// Keep-alive connections that each made one request and stay open,
	// then connections that send nothing at all.
	for range 40 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
		rawGet(c, "/health", "") // may be cut: the agent evicts the idle
	}
	for range 60 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, path := range []string{"/health", "/v1/traffic", "/metrics"} {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s during the flood: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s during the flood: %d", path, resp.StatusCode)
		}
	}
	// A client gets in once the silent connections may be evicted.
	var ws *websocket.Conn
	for ws == nil {
		c, resp, err := dialWS(ctx, addr)
		switch {
		case err == nil:
			ws = c
		case resp != nil && resp.StatusCode == http.StatusServiceUnavailable:
			time.Sleep(100 * time.Millisecond) // a reserve connection: again
		default:
			t.Fatalf("websocket dial during the flood: %v", err)
		}
	}
	defer ws.CloseNow()
	if _, msg, err := ws.Read(ctx); err != nil || !strings.Contains(string(msg), `"hello"`) {
		t.Fatalf("hello: %s %v", msg, err)
	}
}

// TestReserveServesHostRoutesOnly: when every connection slot holds a
// websocket (never evicted), a new connection still answers /health and
// the host routes, once, and refuses the rest with 503.
func TestReserveServesHostRoutesOnly(t *testing.T) {
	t.Parallel()
	addr := served(t, func(c *Options) { c.MaxConns = 4 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var held []*websocket.Conn
	for range 4 {
		c, _, err := dialWS(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		defer c.CloseNow()
	}
	for _, c := range []struct {
		path   string
		status int
	}{{"/health", 200}, {"/v1/traffic", 200}, {"/metrics", 200}, {"/nope", 503}, {"/v1/connect", 503}} {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rawGet(nc, c.path, testToken)
		if err != nil || resp.StatusCode != c.status || !resp.Close {
			t.Errorf("%s on a reserve connection: %v %v, want %d and Connection: close", c.path, resp, err, c.status)
		}
		nc.Close()
	}
	if _, resp, err := dialWS(ctx, addr); err == nil || resp == nil || resp.StatusCode != 503 {
		t.Fatalf("websocket dial with every slot held: %v %v, want 503", resp, err)
	}
	held[0].Close(websocket.StatusNormalClosure, "")
	var ws *websocket.Conn
	for ws == nil { // the slot frees once the agent saw the close
		c, _, err := dialWS(ctx, addr)
		if err == nil {
			ws = c
		} else if ctx.Err() != nil {
			t.Fatalf("no slot after a websocket closed: %v", err)
		}
	}
	ws.CloseNow()
}

// slowBody sends a request with a 100-byte body of which it sends one
// byte, as a peer that holds a connection by never finishing its body.
func slowBody(t *testing.T, addr, method, path string, header ...string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := method + " " + path + " HTTP/1.1\r\nHost: agent\r\nContent-Length: 100\r\n"
	for _, h := range header {
		req += h + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\nx"); err != nil {
		t.Fatal(err)
	}
	return c
}

// countRequests counts the requests srv starts reading.
func countRequests(srv *Server, n *atomic.Int64) {
	srv.onState = func(s http.ConnState) {
		if s == http.StateActive {
			n.Add(1)
		}
	}
}

// dialWSWithin dials the agent's websocket with the token, again while
// the agent answers 503 (a reserve connection), until ctx ends.
func dialWSWithin(ctx context.Context, t *testing.T, addr string) *websocket.Conn {
	t.Helper()
	for {
		c, resp, err := dialWS(ctx, addr)
		switch {
		case err == nil:
			t.Cleanup(func() { c.CloseNow() })
			return c
		case ctx.Err() != nil:
			t.Fatalf("websocket dial with the token: %v", err)
		case resp != nil && resp.StatusCode == http.StatusServiceUnavailable:
			time.Sleep(50 * time.Millisecond)
		default:
			t.Fatalf("websocket dial with the token: %v", err)
		}
	}
}

// TestRefusedSlowBodiesFreeTheirConnections: requests without the token
// that send a body slowly (a 401 from the agent or a mounted surface, a
// 404, a 405) get their answer at once and lose their connection, so
// they cannot fill the unauthenticated share and keep a client with the
// token out.
func TestRefusedSlowBodiesFreeTheirConnections(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	addr := serve(t, func(c *Options) { c.MaxConns = 10 }, func(srv *Server) { // 5 unauthenticated
		// A surface that refuses without reading the body, as each does.
		srv.Mount(Surface{Name: "refusing", Routes: []Route{{Pattern: "/surface/", Access: Public,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusUnauthorized)
			})}}})
		countRequests(srv, &requests)
	})
	cases := []struct {
		method, path string
		header       []string
		status       int
	}{
		{"POST", "/v1/resume", nil, 401},
		{"POST", "/v1/resume", []string{"Authorization: Bearer " + testToken[:4]}, 401},
		{"POST", "/surface/x", []string{"X-Access-Token: wrong"}, 401},
		{"PUT", "/nope", nil, 404},
		{"POST", "/health", nil, 405},
	}
	// Each fills one slot of the unauthenticated share.
	var flood []net.Conn
	for i, c := range cases {
		flood = append(flood, slowBody(t, addr, c.method, c.path, c.header...))
		waitFor(t, func() bool { return requests.Load() > int64(i) })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws := dialWSWithin(ctx, t, addr)
	if _, msg, err := ws.Read(ctx); err != nil || !strings.Contains(string(msg), `"hello"`) {
		t.Fatalf("hello: %s %v", msg, err)
	}
	for i, c := range flood {
		want := cases[i]
		status, err := surfacetest.AnsweredAndClosed(c)
		if err != nil {
			t.Errorf("%s %s with a slow body: %v", want.method, want.path, err)
		}
		if status != want.status {
			t.Errorf("%s %s with a slow body: %d, want %d", want.method, want.path, status, want.status)
		}
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
	}
}

// TestStaleUnauthenticatedRequestsEvicted: requests without the token
// that a handler serves for long (a surface reading a body it takes
// without the token, sent slowly) are evicted for a client with the
// token once they are older than a header may take.
func TestStaleUnauthenticatedRequestsEvicted(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	addr := serve(t, func(c *Options) { c.MaxConns = 4 }, func(srv *Server) { // 2 unauthenticated
		srv.conns.stale = 200 * time.Millisecond
		srv.Mount(Surface{Name: "upload", Routes: []Route{{Pattern: "/upload", Access: Public,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
			})}}})
		countRequests(srv, &requests)
	})
	var flood []net.Conn
	for i := range 2 {
		flood = append(flood, slowBody(t, addr, "POST", "/upload"))
		waitFor(t, func() bool { return requests.Load() > int64(i) })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dialWSWithin(ctx, t, addr)
	evicted := 0
	for _, c := range flood { // the evicted one was closed before the dial's answer
		c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); errors.Is(err, io.EOF) {
			evicted++
		}
	}
	if evicted != 1 {
		t.Fatalf("%d slow uploads evicted for one client, want 1", evicted)
	}
}

// TestLongAuthenticatedRequestsKept: a long request that showed the
// token (a big upload from a slow client) is never evicted, however old:
// a client that finds every slot so held is refused instead.
func TestLongAuthenticatedRequestsKept(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	addr := serve(t, func(c *Options) { c.MaxConns = 4 }, func(srv *Server) {
		srv.conns.stale = 50 * time.Millisecond
		srv.Mount(Surface{Name: "upload", Tokens: nativeTokens, Routes: []Route{{Pattern: "/upload",
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
			})}}})
		countRequests(srv, &requests)
	})
	var uploads []net.Conn
	for i := range 4 {
		uploads = append(uploads, slowBody(t, addr, "POST", "/upload", "Authorization: Bearer "+testToken))
		waitFor(t, func() bool { return requests.Load() > int64(i) })
	}
	time.Sleep(200 * time.Millisecond) // every upload is now older than stale
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if c, _, err := dialWS(ctx, addr); err == nil {
		c.CloseNow()
		t.Fatal("a websocket got in while every slot held an upload with the token")
	}
	for i, c := range uploads {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, strings.Repeat("y", 99)); err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("upload %d lost its connection: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("upload %d: %d", i, resp.StatusCode)
		}
	}
}

// TestReserveSlowBodiesFreed: a request on a reserve connection that
// leaves its body unread gets its answer and loses the connection, so
// slow bodies cannot fill the reserve and keep the host out.
func TestReserveSlowBodiesFreed(t *testing.T) {
	t.Parallel()
	addr := served(t, func(c *Options) { c.MaxConns = 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 2 {
		dialWSWithin(ctx, t, addr)
	}
	for i := range reserveConns + 4 {
		path, status := "/nope", 503
		if i%2 == 0 {
			path, status = "/health", 405
		}
		got, err := surfacetest.AnsweredAndClosed(slowBody(t, addr, "POST", path))
		if err != nil || got != status {
			t.Fatalf("POST %s with a slow body on a reserve connection: %d %v, want %d", path, got, err, status)
		}
	}
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if resp, err := rawGet(nc, "/health", ""); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/health after slow bodies on the reserve: %v %v", resp, err)
	}
}

// TestServeOnlyShutdown: Shutdown stops a listener ServeOnly serves.
func TestServeOnlyShutdown(t *testing.T) {
	t.Parallel()
	srv := New(Options{Auth: NewAuth(testToken)})
	srv.Mount(Surface{Name: "alone", Routes: []Route{{Pattern: "/alone", Access: Public, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})}}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() {
		served <- srv.ServeOnly(l, "alone")
	}()
	waitFor(t, func() bool {
		resp, err := http.Get("http://" + l.Addr().String() + "/alone")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("ServeOnly after Shutdown: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("ServeOnly still serving after Shutdown")
	}
}

// TestUnreadRequestNotEvicted: a connection whose request has arrived but
// that the server has not read yet (its goroutine lags behind a flood
// accepted on another listener) is not taken for a silent one: the flood
// evicts its own request-less connections, older or not.
func TestUnreadRequestNotEvicted(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var clients []net.Conn
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	accept := func(request string) net.Conn {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		if request != "" {
			if _, err := io.WriteString(c, request); err != nil {
				t.Fatal(err)
			}
		}
		nc, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return nc
	}
	request := "GET /health HTTP/1.1\r\nHost: agent\r\n\r\n"
	tr := newConns(4, zap.NewNop()) // at most 2 unauthenticated
	client := tr.admit(accept(request))
	silent := tr.admit(accept(""))
	waitFor(t, func() bool { return unread(client.Conn) })
	next := tr.admit(accept(""))
	if next == nil || next.reserve {
		t.Fatalf("a connection over the unauthenticated limit: %+v, want one served after an eviction", next)
	}
	if client.closed.Load() || !silent.closed.Load() {
		t.Fatalf("evicted: the unread request %v, the silent connection %v; want only the silent one", client.closed.Load(), silent.closed.Load())
	}

	// A flood whose every connection sends a request at once, none read:
	// an eviction passes over maxUnreadSkips of them, then takes the
	// next oldest, rather than scanning them all for every admission.
	const n = 2 * (maxUnreadSkips + 2)
	tr = newConns(2*n, zap.NewNop()) // at most n unauthenticated
	var flood []*conn
	for range n {
		c := tr.admit(accept(request))
		waitFor(t, func() bool { return unread(c.Conn) })
		flood = append(flood, c)
		time.Sleep(time.Millisecond) // distinct ages
	}
	if next := tr.admit(accept(request)); next == nil || next.reserve {
		t.Fatalf("over the limit with %d unread requests: %+v, want one served after an eviction", n, next)
	}
	for i, c := range flood {
		if want := i == maxUnreadSkips; c.closed.Load() != want {
			t.Errorf("connection %d of %d with an unread request: evicted %v, want only the one after the %d oldest skipped", i, n, c.closed.Load(), maxUnreadSkips)
		}
	}
}

// TestHTTPLogLinesAreJSON: net/http's own log lines (here a handler's
// superfluous WriteHeader) go through the agent's logger, at warn under
// "http", not to stderr as plain text.
func TestHTTPLogLinesAreJSON(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.WarnLevel)
	addr := serve(t, func(o *Options) { o.Logger = zap.New(core) }, func(srv *Server) {
		srv.Mount(Surface{Name: "twice", Routes: []Route{{Pattern: "/twice", Access: Public,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusNoContent)
				w.WriteHeader(http.StatusTeapot)
			})}}})
	})
	resp, err := http.Get("http://" + addr + "/twice")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitFor(t, func() bool {
		for _, e := range logs.All() {
			if e.LoggerName == "http" && strings.Contains(e.Message, "superfluous") {
				return true
			}
		}
		return false
	})
}
