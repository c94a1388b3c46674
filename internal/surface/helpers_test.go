package surface

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

const testToken = "test-token-0123456789"

// nativeTokens is where the test surfaces take the token, as the native
// protocol does.
var nativeTokens = FirstOf(FromAuthorization("Bearer"), FromQuery("access_token"))

// testSurfaces are a host surface (health public; traffic, metrics and
// resume with the token) and a websocket route that says hello and holds
// the connection until the client or Stop closes it: enough of the
// agent's shape to drive the connection limits through real sockets.
func testSurfaces() []Surface {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, 200, map[string]string{"status": "ok"}) })
	host := Surface{Name: "host", Tokens: nativeTokens, Routes: []Route{
		{Pattern: "GET /health", Handler: ok, Access: Public, Host: true},
		{Pattern: "GET /v1/traffic", Handler: ok, Host: true},
		{Pattern: "GET /metrics", Handler: ok, Host: true},
		{Pattern: "POST /v1/resume", Handler: ok, Host: true},
	}}
	var mu sync.Mutex
	held := map[*websocket.Conn]bool{}
	ws := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		mu.Lock()
		held[c] = true
		mu.Unlock()
		defer func() {
			mu.Lock()
			delete(held, c)
			mu.Unlock()
		}()
		ctx := context.Background()
		c.Write(ctx, websocket.MessageText, []byte(`{"event":"hello"}`))
		for {
			if _, _, err := c.Read(ctx); err != nil {
				return
			}
		}
	})
	native := Surface{Name: "native", Tokens: nativeTokens,
		Routes: []Route{{Pattern: "GET /v1/connect", Handler: ws}},
		Stop: func(ctx context.Context) {
			mu.Lock()
			defer mu.Unlock()
			for c := range held {
				c.CloseNow()
			}
		},
	}
	return []Surface{host, native}
}

// serve runs a server of the test surfaces on a real listener, with
// edit applied to its options and prep run on it before it serves, and
// returns its address.
func serve(t *testing.T, edit func(*Options), prep func(*Server)) string {
	o := Options{Auth: NewAuth(testToken)}
	edit(&o)
	srv := New(o)
	for _, sf := range testSurfaces() {
		srv.Mount(sf)
	}
	prep(srv)
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

func served(t *testing.T, edit func(*Options)) string {
	return serve(t, edit, func(*Server) {})
}
