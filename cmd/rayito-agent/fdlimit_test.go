package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
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
