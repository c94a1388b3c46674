package surface

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestSuspendAnswersWhatItReadAndAcceptsNothing: a request in flight when
// the server suspends gets its answer before Suspend returns; a client
// that connects while it is suspended waits in the backlog, its request
// unanswered, and is served once the server serves again: no refused
// connection, no lost request.
func TestSuspendAnswersWhatItReadAndAcceptsNothing(t *testing.T) {
	release := make(chan struct{})
	slow := Surface{Name: "slow", Tokens: nativeTokens, Routes: []Route{{Pattern: "GET /slow", Access: Public,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-release
			io.WriteString(w, "slow answer")
		})}}}
	srv := New(Options{Auth: NewAuth(testToken)})
	srv.Mount(slow)
	for _, sf := range testSurfaces() {
		srv.Mount(sf)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	addr := l.Addr().String()

	inFlight := make(chan string, 1)
	go func() {
		r, err := http.Get("http://" + addr + "/slow")
		if err != nil {
			inFlight <- err.Error()
			return
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		inFlight <- string(b)
	}()
	waitFor(t, func() bool { return srv.conns.quiet() == 1 })
	// A client that connected and says nothing does not hold the
	// suspension: it is closed once it stayed silent a while.
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	waitFor(t, func() bool {
		srv.conns.mu.Lock()
		defer srv.conns.mu.Unlock()
		return len(srv.conns.open) == 2
	})
	suspended := make(chan error, 1)
	go func() { suspended <- srv.Suspend(context.Background()) }()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-suspended:
		t.Fatalf("Suspend returned with a request in flight: %v", err)
	default:
	}
	close(release)
	if got := <-inFlight; got != "slow answer" {
		t.Fatalf("the request in flight got %q", got)
	}
	if err := <-suspended; err != nil {
		t.Fatal(err)
	}
	silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the silent client's connection: %v, want it closed", err)
	}

	// Suspended: a new client connects (the backlog) and is not served.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("a client connecting while suspended was refused: %v", err)
	}
	defer c.Close()
	io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	br := bufio.NewReader(c)
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("a client was served while the server was suspended")
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	srv.Unsuspend()
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, "200") {
		t.Fatalf("after Unsuspend the waiting client got %q, %v", line, err)
	}
}

// TestSuspendGivesUpAtItsDeadline: a request that does not end by ctx's
// deadline makes Suspend fail, saying so; Unsuspend serves again.
func TestSuspendGivesUpAtItsDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := New(Options{Auth: NewAuth(testToken)})
	srv.Mount(Surface{Name: "slow", Tokens: nativeTokens, Routes: []Route{{Pattern: "GET /slow", Access: Public,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release })}}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	go http.Get("http://" + l.Addr().String() + "/slow")
	waitFor(t, func() bool { return srv.conns.quiet() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := srv.Suspend(ctx); err == nil || !strings.Contains(err.Error(), "1 connections still had a request in flight") {
		t.Fatalf("Suspend past its deadline: %v", err)
	}
	srv.Unsuspend()
	r, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + l.Addr().String() + "/nothing")
	if err != nil {
		t.Fatalf("not served after Unsuspend: %v", err)
	}
	r.Body.Close()
}
