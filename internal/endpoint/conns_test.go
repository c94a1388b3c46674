package endpoint

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// served runs another server over a's managers on a real listener, as
// the agent does (the test agent's httptest server bypasses Serve).
func (a *testAgent) served(t *testing.T, edit func(*Config)) string {
	cfg := a.srv.cfg
	edit(&cfg)
	srv := New(cfg)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return l.Addr().String()
}

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
	a := newTestAgent(t)
	addr := a.served(t, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
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
	a := newTestAgent(t)
	addr := a.served(t, func(c *Config) { c.MaxConns = 8 })
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
	a := newTestAgent(t)
	addr := a.served(t, func(c *Config) { c.MaxConns = 4 })
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
