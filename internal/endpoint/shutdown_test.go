package endpoint

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestShutdownClosesSessions: the agent's shutdown (the registry of
// long-lived connections, one for every surface) closes each websocket
// with 1001 and waits for its session's end; a connect after it is
// refused with 503.
func TestShutdownClosesSessions(t *testing.T) {
	a := newTestAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	closed := make(chan error, 2)
	for range 2 {
		rc := a.dial(t)
		go func() { // a client reads, and so answers the close
			var err error
			for err == nil {
				_, _, err = rc.c.Read(ctx)
			}
			closed <- err
		}()
	}
	if err := a.kit.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the shutdown waited its whole bound")
	}
	for i := range 2 {
		if err := <-closed; websocket.CloseStatus(err) != websocket.StatusGoingAway {
			t.Errorf("connection %d closed with %v, want 1001", i, err)
		}
	}
	if n := len(a.srv.Sessions()); n != 0 {
		t.Errorf("%d sessions after the shutdown", n)
	}
	res, err := http.Get(a.http.URL + "/v1/connect?access_token=" + testToken)
	if err == nil {
		res.Body.Close()
		if res.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("a connect after the shutdown: %d, want 503", res.StatusCode)
		}
	}
}
