package surface

import (
	"net/http"
	"testing"
)

// ClientOf names a client by its address without the port, whatever the
// listener: TCP (v4 and v6), vsock, a Unix socket.
func TestClientOf(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.2:41234":    "127.0.0.2",
		"[::1]:41234":        "::1",
		"host(2):1234":       "host(2)",
		"vm(3):52":           "vm(3)",
		"@":                  "@",
		"":                   "",
		"10.0.0.7:1":         "10.0.0.7",
		"[fe80::1%eth0]:443": "fe80::1%eth0",
	} {
		if got := ClientOf(&http.Request{RemoteAddr: addr}); got != want {
			t.Errorf("ClientOf(%q) = %q, want %q", addr, got, want)
		}
	}
}
