package client_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// fakeFirecracker listens on a Unix socket and answers each connection's
// CONNECT line as answer says: proxy to target after "OK", or misbehave.
func fakeFirecracker(t *testing.T, target string, answer func(port string) string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "v.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		// A VMM that never answered hangs up with the test, so that no
		// handshake is left waiting for its bound.
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				port, _ := strings.CutPrefix(strings.TrimSpace(line), "CONNECT ")
				switch a := answer(port); a {
				case "close":
					return
				case "hang":
					io.Copy(io.Discard, c)
					return
				case "ok":
					up, err := net.Dial("tcp", target)
					if err != nil {
						return
					}
					defer up.Close()
					io.WriteString(c, "OK 1073741824\n")
					go io.Copy(up, r)
					io.Copy(c, up)
				default:
					io.WriteString(c, a)
				}
			}()
		}
	}()
	return path
}

// TestHybridVsock: the SDK reaches an agent through Firecracker's hybrid
// vsock handshake, for calls and host calls alike; a refused CONNECT, a
// garbled answer and one that never comes are errors that say so, in
// time.
func TestHybridVsock(t *testing.T) {
	a := newAgent(t)
	addr := strings.TrimPrefix(a.url, "ws://")
	var asked []string
	path := fakeFirecracker(t, addr, func(port string) string { asked = append(asked, port); return "ok" })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := "hvsock://" + path + ":49983"
	c, err := client.Dial(ctx, url, client.Options{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"echo", "over hybrid vsock"}})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(p.Stdout())
	if string(out) != "over hybrid vsock\n" {
		t.Fatalf("stdout %q", out)
	}
	if _, err := (client.Host{URL: url, Token: testToken}).Traffic(ctx); err != nil {
		t.Fatalf("a host call over hybrid vsock: %v", err)
	}
	if len(asked) == 0 || asked[0] != "49983" {
		t.Fatalf("CONNECT lines named ports %v", asked)
	}

	for _, tc := range []struct{ answer, want string }{
		{"close", "refused"},
		{"NOPE\n", "garbled answer"},
		{"hang", "deadline exceeded"},
	} {
		p := fakeFirecracker(t, addr, func(string) string { return tc.answer })
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		started := time.Now()
		_, err := client.Dial(cctx, "hvsock://"+p+":49983", client.Options{Token: testToken, DisableReconnect: true})
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error saying %q", tc.answer, err, tc.want)
		}
		if took := time.Since(started); took > 30*time.Second {
			t.Errorf("%s: the error took %v", tc.answer, took)
		}
	}
	// The dialer alone says why it gave up, when ctx ends first too (the
	// HTTP transport above reports its own context error then).
	slow := fakeFirecracker(t, addr, func(string) string { return "hang" })
	cctx, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	if _, err := client.HybridVsockDialer(slow, 49983)(cctx); err == nil || !strings.Contains(err.Error(), "no answer to CONNECT in time") {
		t.Errorf("a VMM that never answers: %v", err)
	}
}

// TestTransportURLs: malformed vsock and hvsock URLs are refused with
// what the form should be; a custom Dialer carries any URL.
func TestTransportURLs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, u := range []string{"vsock://x:1", "vsock://3", "hvsock://nopath", "hvsock:///run/v.sock:port", "ftp://x"} {
		if _, err := client.Dial(ctx, u, client.Options{}); err == nil || !strings.Contains(err.Error(), "want") && !strings.Contains(err.Error(), "scheme must be") {
			t.Errorf("%s: %v", u, err)
		}
	}
	a := newAgent(t)
	addr := strings.TrimPrefix(a.url, "ws://")
	dials := 0
	c, err := client.Dial(ctx, "ws://agent.invalid", client.Options{Token: testToken, Dialer: func(ctx context.Context) (net.Conn, error) {
		dials++
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Health(ctx); err != nil || dials == 0 {
		t.Fatalf("health over a custom dialer: %v (%d dials)", err, dials)
	}
}

// TestHybridVsockConnOutlivesItsHandshake: the handshake's deadline (here
// the dial context's 2 s) is lifted once it is done: the connection still
// carries bytes after the deadline passed (it died there before).
func TestHybridVsockConnOutlivesItsHandshake(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	path := fakeFirecracker(t, echo.Addr().String(), func(string) string { return "ok" })
	// Ample for a local handshake on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := client.HybridVsockDialer(path, 49983)(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	<-ctx.Done()
	time.Sleep(100 * time.Millisecond)
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatalf("write after the handshake's deadline: %v", err)
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(c, b); err != nil || b[0] != 'x' {
		t.Fatalf("read after the handshake's deadline: %q, %v", b, err)
	}
}
