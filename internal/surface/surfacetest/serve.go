package surfacetest

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Serve serves an agent's handler h on a test HTTP server. At cleanup it
// shuts the agent down (shutdown, given at most 10 s), closes the server,
// then runs closeAll for the managers the agent served.
func Serve(t testing.TB, h http.Handler, shutdown func(context.Context) error, closeAll func()) *httptest.Server {
	return ServeWith(t, h, nil, shutdown, closeAll)
}

// ServeWith is Serve on a listener wrap made of the server's, if wrap is
// not nil.
func ServeWith(t testing.TB, h http.Handler, wrap func(net.Listener) net.Listener, shutdown func(context.Context) error, closeAll func()) *httptest.Server {
	hs := httptest.NewUnstartedServer(h)
	if wrap != nil {
		hs.Listener = wrap(hs.Listener)
	}
	hs.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shutdown(ctx)
		hs.Close()
		closeAll()
	})
	return hs
}
