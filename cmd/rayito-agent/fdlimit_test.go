package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/internal/surface/surfacetest"
)

// TestDescriptorFlood: under a low descriptor limit, peers without a
// token that hold hundreds of keep-alive connections cannot make /health
// fail, hang a websocket dial or keep a command from starting.
func TestDescriptorFlood(t *testing.T) {
	t.Parallel()
	const limit, flood = 400, 388
	url := startAgentWith(t, "fd-token", agentOptions{prefix: []string{"sh", "-c", `ulimit -n 400 && exec "$0" "$@"`}}).url
	addr := strings.TrimPrefix(url, "ws://")
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range flood {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /health HTTP/1.1\r\nHost: agent\r\n\r\n"); err == nil {
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				resp.Body.Close() // kept alive, idle
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := client.GetHealth(ctx, url, nil)
	if err != nil || h.Status != "ok" {
		t.Fatalf("/health under a %d-connection flood with ulimit -n %d: %+v, %v", flood, limit, h, err)
	}
	c, err := client.Dial(ctx, url, client.Options{Token: "fd-token"})
	if err != nil {
		t.Fatalf("websocket dial under the flood: %v", err)
	}
	defer c.Close()
	p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"echo", "still here"}})
	if err != nil {
		t.Fatalf("exec under the flood: %v", err)
	}
	out, _ := io.ReadAll(p.Stdout())
	if st, err := p.Wait(ctx); err != nil || st.ExitCode() != 0 || string(out) != "still here\n" {
		t.Fatalf("exec under the flood: %q, %+v, %v", out, st, err)
	}
}

// TestSlowBodiesWithoutToken: peers without a token that send request
// bodies slowly to every surface (the agent's own routes, envd, the
// Jupyter and code-interpreter APIs) get their 401 at once and lose
// their connection, so they cannot keep a client with the token out.
func TestSlowBodiesWithoutToken(t *testing.T) {
	t.Parallel()
	// ulimit -n 120: 40 connections, 20 of them without the token. The
	// flood leaves two for the start's health poll and the dial: were it
	// to fill them, the agent would evict flood connections it has not
	// read yet, as it should, and the test would see resets.
	const unauth = 20 - 2
	url := startAgentWith(t, "slow-token", agentOptions{prefix: []string{"sh", "-c", `ulimit -n 120 && exec "$0" "$@"`}}).url
	addr := strings.TrimPrefix(url, "ws://")
	routes := []struct{ path, header string }{
		{"/v1/resume", "Authorization: Bearer slow-tok"},
		{"/process.Process/Start", "X-Access-Token: slow-token-and-more"},
		{"/files?path=/tmp/x", ""},
		{"/api/kernels", "Authorization: token slow"},
		{"/execute", "E2B-Traffic-Access-Token: wrong"},
	}
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for i := range unauth {
		rt := routes[i%len(routes)]
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
		req := "POST " + rt.path + " HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"
		if rt.header != "" {
			req += rt.header + "\r\n"
		}
		if _, err := io.WriteString(c, req+"\r\n{"); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range flood {
		rt := routes[i%len(routes)]
		status, err := surfacetest.AnsweredAndClosed(c)
		if err != nil || status != http.StatusUnauthorized && status != http.StatusForbidden {
			t.Fatalf("POST %s with a slow body: %d %v, want 401 or 403 (Jupyter's) at once, then the connection closed", rt.path, status, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		c, err := client.Dial(ctx, url, client.Options{Token: "slow-token"})
		if err == nil {
			c.Close()
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("websocket dial with the token after %d slow bodies without it: %v", unauth, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCodeInterpreterListenerLimited: the code-interpreter API's own
// listener has the main listener's limits, shared with it: silent
// connections to it cannot take the descriptors the main listener needs,
// and a slow body without the token gets its 401 at once.
func TestCodeInterpreterListenerLimited(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ciAddr := l.Addr().String()
	l.Close()
	url := startAgentWith(t, "ci-token", agentOptions{prefix: []string{"sh", "-c", `ulimit -n 120 && exec "$0" "$@"`},
		flags: "--code-interpreter-listen " + ciAddr}).url
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 110 { // more than the descriptors left
		c, err := net.Dial("tcp", ciAddr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// The agent may still be accepting the flood, each new silent
	// connection evicting the oldest that has sent no request, idle
	// keep-alive ones first. A request that has arrived is passed over;
	// a connection whose client has not sent its request yet (a loaded
	// machine can hold the client back while the agent admits dozens more
	// of the flood), or an idle one the HTTP client picks from its pool,
	// looks as silent as the flood and may go, as a client under such a
	// flood would see: it tries again, and once the flood is in, it gets
	// through.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	throughFlood(t, ctx, "/health", func() error {
		h, err := client.GetHealth(ctx, url, nil)
		if err == nil && h.Status != "ok" {
			err = fmt.Errorf("status %q", h.Status)
		}
		return err
	})
	throughFlood(t, ctx, "websocket dial", func() error {
		c, err := client.Dial(ctx, url, client.Options{Token: "ci-token"})
		if err == nil {
			c.Close()
		}
		return err
	})

	slow, err := net.Dial("tcp", ciAddr)
	if err != nil {
		t.Fatal(err)
	}
	held = append(held, slow)
	if _, err := io.WriteString(slow, "POST /execute HTTP/1.1\r\nHost: agent\r\nContent-Length: 100\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	if status, err := surfacetest.AnsweredAndClosed(slow); err != nil || status != http.StatusUnauthorized {
		t.Fatalf("POST /execute with a slow body and no token: %d %v, want 401 at once, then the connection closed", status, err)
	}
}

// throughFlood retries f until it succeeds, failing the test at ctx's end.
func throughFlood(t *testing.T, ctx context.Context, what string, f func() error) {
	t.Helper()
	for {
		err := f()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s with 110 silent connections to the code-interpreter listener: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
