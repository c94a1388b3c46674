package e2e

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// routeURL is the sandbox's address as the client knows it. It never
// resolves: hostRoute's dialer decides where it leads.
const routeURL = "http://sandbox.e2e.invalid:49983"

// hostRoute plays the host's stable address for a sandbox: a restored VM
// listens on another port, but the client keeps dialing the same URL and
// the route leads to whichever QEMU runs the VM now. While the VM is down
// dials wait for it (bounded by their context), as a host's front proxy
// would hold them, so the client's automatic reconnect finds the restored
// VM as soon as it is up.
type hostRoute struct {
	mu        sync.Mutex
	addr      string        // "127.0.0.1:port", "" while down
	up        chan struct{} // closed when addr is set
	transport *http.Transport
	client    *http.Client
}

func newHostRoute() *hostRoute {
	r := &hostRoute{up: make(chan struct{})}
	r.transport = &http.Transport{DialContext: r.dial, MaxIdleConnsPerHost: 4}
	r.client = &http.Client{Transport: r.transport, Timeout: opTimeout}
	return r
}

// HTTPClient is for client.Options.HTTPClient: the websocket and the
// HTTP calls go through the route.
func (r *hostRoute) HTTPClient() *http.Client { return r.client }

// Set points the route at the agent's forwarded port (vm.VM.AgentURL's
// host:port).
func (r *hostRoute) Set(addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addr = addr
	select {
	case <-r.up:
	default:
		close(r.up)
	}
}

// Down makes new dials wait; pooled HTTP connections to the old VM are
// dropped.
func (r *hostRoute) Down() {
	r.mu.Lock()
	r.addr = ""
	select {
	case <-r.up:
		r.up = make(chan struct{})
	default:
	}
	r.mu.Unlock()
	r.transport.CloseIdleConnections()
}

// Close drops pooled connections.
func (r *hostRoute) Close() { r.transport.CloseIdleConnections() }

func (r *hostRoute) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	var d net.Dialer
	for {
		r.mu.Lock()
		addr, up := r.addr, r.up
		r.mu.Unlock()
		if addr != "" {
			return d.DialContext(ctx, network, addr)
		}
		select {
		case <-up:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
