package endpoint

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/wire"
)

// A producer that writes a little output to an idle connection itself
// (deliver) must never wait for that client: producers serve every
// client of a stream. A write blocks only when the socket's send buffer
// is full, which a client that stopped reading leaves it; so deliver asks
// the kernel how much the socket holds that the peer has not yet
// acknowledged (SIOCOUTQ), and writes only when that is below
// directRoom, where any send buffer has room for one more small frame.

// directRoom bounds what may wait in the socket for deliver to write: the
// send buffer starts at 16 KiB (tcp_wmem) and never goes below about
// 4.5 KiB, and a stalled peer's unsent bytes gather in few buffers.
const directRoom = 4 << 10

// hijackCapture is the ResponseWriter websocket.Accept hijacks: it keeps
// the connection taken over, for its socket.
type hijackCapture struct {
	http.ResponseWriter
	conn net.Conn
}

func (h *hijackCapture) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("http.ResponseWriter does not implement http.Hijacker")
	}
	c, rw, err := hj.Hijack()
	h.conn = c
	return c, rw, err
}

// rawSocket is the socket under c (through wrappers that give their
// NetConn, as the connection limiter's does), nil if it has none (a
// pipe): a session without one never writes from a producer's goroutine.
func rawSocket(c net.Conn) syscall.RawConn {
	for range 4 {
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = w.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}

// socketRoom reports whether a frame of deliver's (at most directLimit
// bytes and a header) written to sock now cannot block.
func socketRoom(sock syscall.RawConn) bool {
	if sock == nil {
		return false
	}
	queued, err := -1, error(nil)
	if cerr := sock.Control(func(fd uintptr) { queued, err = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); cerr != nil || err != nil {
		return false
	}
	return queued+directLimit+wire.MaxDataHeader <= directRoom
}
