package surface

import (
	"net"
	"net/http"
	"strings"
)

// ClientOf names the client a request comes from, for the shares of what
// clients hold at once (leases, files held open for downloads): the
// address it came from, without the port. Every client shows the same
// token, so the token cannot tell them apart, and a name a client gives
// itself it can change for every connection; its address it cannot
// multiply at will, and every surface knows it. Clients behind one proxy
// share one address, and so one share: each share is half of the whole,
// so that much always stays for the others. A vsock peer is named by its
// context id ("host(2)"), a Unix socket's peer "" (one share for all).
func ClientOf(r *http.Request) string {
	a := r.RemoteAddr
	if host, _, err := net.SplitHostPort(a); err == nil {
		return host
	}
	if i := strings.LastIndexByte(a, ':'); i >= 0 {
		return a[:i] // a vsock address: "vm(3):1234"
	}
	return a
}
