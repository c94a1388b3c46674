package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mdlayher/vsock"
)

// Transports. An agent is reached over TCP (ws://, wss://, http://,
// https://), over vsock from inside a VM (vsock://CID:PORT), or from the
// host over Firecracker's hybrid vsock (hvsock://PATH:PORT: the VM's Unix
// socket, a CONNECT handshake, then the stream), the URL form Kata uses
// for the same thing. Options.Dialer covers anything else. Whatever the
// transport, the protocol on top (HTTP, the websocket) is the same, and so
// are reconnects and reattaches.

// A Dialer opens one byte stream to the agent; HTTP and the websocket run
// over it. It must honour ctx.
type Dialer func(ctx context.Context) (net.Conn, error)

// HybridVsockTimeout bounds the hybrid vsock handshake when ctx sets no
// earlier deadline: an answer that never comes is an error, not a hang.
const HybridVsockTimeout = 10 * time.Second

// parseVsock reads vsock://CID:PORT.
func parseVsock(rest string) (Dialer, string, error) {
	cidS, portS, ok := strings.Cut(rest, ":")
	cid, err1 := strconv.ParseUint(cidS, 10, 32)
	port, err2 := strconv.ParseUint(portS, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return nil, "", fmt.Errorf("want vsock://CID:PORT, such as vsock://2:49983")
	}
	d := func(ctx context.Context) (net.Conn, error) {
		c, err := vsock.DialContext(ctx, uint32(cid), uint32(port), nil)
		if err != nil {
			return nil, fmt.Errorf("vsock %d:%d: %w", cid, port, err)
		}
		return c, nil
	}
	return d, fmt.Sprintf("vsock-%d-%d", cid, port), nil
}

// parseHybridVsock reads hvsock://PATH:PORT (PATH is the VM's Unix socket,
// absolute: hvsock:///run/fc/v.sock:49983).
func parseHybridVsock(rest string) (Dialer, string, error) {
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return nil, "", fmt.Errorf("want hvsock://PATH:PORT, such as hvsock:///run/fc/v.sock:49983")
	}
	path := rest[:i]
	port, err := strconv.ParseUint(rest[i+1:], 10, 32)
	if err != nil {
		return nil, "", fmt.Errorf("want hvsock://PATH:PORT, such as hvsock:///run/fc/v.sock:49983: bad port %q", rest[i+1:])
	}
	return HybridVsockDialer(path, uint32(port)), "hvsock-" + strconv.FormatUint(port, 10), nil
}

// HybridVsockDialer dials a guest's vsock port through Firecracker's
// hybrid vsock: connect to the VM's Unix socket at path, write
// "CONNECT <port>\n", read "OK <hostport>\n", then the stream is the
// guest's. A refused connection, a garbled answer or none in time is an
// error that says which.
func HybridVsockDialer(path string, port uint32) Dialer {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err != nil {
			return nil, fmt.Errorf("hybrid vsock %s: %w", path, err)
		}
		deadline := time.Now().Add(HybridVsockTimeout)
		if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
			deadline = dl
		}
		c.SetDeadline(deadline)
		stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
		err = hybridHandshake(c, port)
		if !stop() && err == nil {
			err = ctx.Err()
		}
		if err != nil {
			c.Close()
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (%w)", err, ctx.Err())
			}
			return nil, fmt.Errorf("hybrid vsock %s port %d: %w", path, port, err)
		}
		c.SetDeadline(time.Time{})
		return c, nil
	}
}

// hybridHandshake writes the CONNECT line and reads the answer a byte at
// a time: what follows the answer's newline is the guest's stream and
// must stay unread.
func hybridHandshake(c net.Conn, port uint32) error {
	if _, err := fmt.Fprintf(c, "CONNECT %d\n", port); err != nil {
		return fmt.Errorf("sending CONNECT: %w", err)
	}
	var line []byte
	var b [1]byte
	for len(line) < 64 {
		n, err := c.Read(b[:])
		if n == 1 {
			if b[0] == '\n' {
				break
			}
			line = append(line, b[0])
			continue
		}
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			return fmt.Errorf("no answer to CONNECT in time (got %q)", line)
		case err != nil && len(line) == 0:
			return fmt.Errorf("refused: the VMM closed the connection (is anything listening on port %d in the guest?): %w", port, err)
		case err != nil:
			return fmt.Errorf("the answer to CONNECT broke off after %q: %w", line, err)
		}
	}
	answer := string(line)
	host, ok := strings.CutPrefix(answer, "OK ")
	if _, err := strconv.ParseUint(host, 10, 32); !ok || err != nil {
		return fmt.Errorf("garbled answer to CONNECT: %q, want \"OK <port>\"", answer)
	}
	return nil
}

// withDialer returns an HTTP client whose connections are made by d (nil:
// base unchanged). The URL's host then only names the agent in requests.
func withDialer(base *http.Client, d Dialer) *http.Client {
	if d == nil {
		return base
	}
	if base == nil {
		base = http.DefaultClient
	}
	var tr *http.Transport
	if t, ok := base.Transport.(*http.Transport); ok && t != nil {
		tr = t.Clone()
	} else {
		tr = http.DefaultTransport.(*http.Transport).Clone()
	}
	tr.Proxy = nil
	tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return d(ctx) }
	tr.DialTLSContext = nil
	hc := *base
	hc.Transport = tr
	return &hc
}
