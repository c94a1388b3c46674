package main

import (
	"net"

	"github.com/mdlayher/vsock"
	"go.uber.org/zap"
)

// hostOnlyListener is the host listener over vsock: it takes connections
// from the host alone (context id 2). The guest's own programs reach a
// vsock port too, through vsock_loopback (context id 1) or the guest's own
// id, and they must not reach the routes that pause, resume or upgrade
// their sandbox.
type hostOnlyListener struct {
	*vsock.Listener
	log *zap.Logger
}

func (l hostOnlyListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if a, ok := c.RemoteAddr().(*vsock.Addr); ok && a.ContextID == vsock.Host {
			return c, nil
		}
		l.log.Warn("the host listener refused a connection that is not the host's", zap.String("from", c.RemoteAddr().String()))
		c.Close()
	}
}

// hostOnly restricts a vsock host listener to the host; a TCP one is
// left as it is (any program of the machine reaches a TCP address: it
// keeps the host's routes off a network the host alone routes to, not
// away from the guest's own programs).
func hostOnly(l net.Listener, log *zap.Logger) net.Listener {
	if vl, ok := l.(*vsock.Listener); ok {
		return hostOnlyListener{Listener: vl, log: log}
	}
	return l
}
