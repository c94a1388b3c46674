package client

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// maxBatchKeep is the batch buffer kept between frames; a larger one
// (from a big frame) is let go.
const maxBatchKeep = 2 << 20

// batchConn gathers the writes of a frame into one system call. The
// websocket library masks what a client sends through a 4 KiB buffer and
// writes each 4 KiB to the connection: a 256 KiB upload frame would cost
// 64 system calls, which on loopback doubles the CPU time of an upload.
//
// Writes between begin and end are kept; end writes them at once. Writes
// outside (the library's own pongs and close frames) go straight through,
// after anything kept. begin and end nest, so concurrent frames (which
// the library serializes) are flushed when the last one ends.
type batchConn struct {
	net.Conn
	mu    sync.Mutex
	depth int
	buf   []byte
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.depth > 0 {
		b.buf = append(b.buf, p...)
		return len(p), nil
	}
	return b.Conn.Write(p)
}

func (b *batchConn) begin() {
	b.mu.Lock()
	b.depth++
	b.mu.Unlock()
}

// end writes what was gathered once no frame is being written, within
// timeout; a failed write closes the connection, since the library
// believes those bytes sent.
func (b *batchConn) end(timeout time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.depth--; b.depth > 0 || len(b.buf) == 0 {
		return nil
	}
	b.Conn.SetWriteDeadline(time.Now().Add(timeout))
	_, err := b.Conn.Write(b.buf)
	b.Conn.SetWriteDeadline(time.Time{})
	if cap(b.buf) > maxBatchKeep {
		b.buf = nil
	} else {
		b.buf = b.buf[:0]
	}
	if err != nil {
		b.Conn.Close()
	}
	return err
}

// batchingClient returns an HTTP client for one websocket handshake whose
// connection is a batchConn, and a function that returns that batchConn
// once the handshake is done. A custom transport that is not an
// *http.Transport is used as it is, without batching.
func batchingClient(base *http.Client) (*http.Client, func() *batchConn) {
	if base == nil {
		base = http.DefaultClient
	}
	var tr *http.Transport
	switch t := base.Transport.(type) {
	case nil:
		tr = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		tr = t.Clone()
	default:
		return base, func() *batchConn { return nil }
	}
	var mu sync.Mutex
	var last *batchConn
	dial := tr.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		bc := &batchConn{Conn: c}
		mu.Lock()
		last = bc
		mu.Unlock()
		return bc, nil
	}
	hc := *base
	hc.Transport = tr
	return &hc, func() *batchConn {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}
