package endpoint

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/surface"
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

// socketRoom reports whether a frame of deliver's (at most directLimit
// bytes and a header) written to sock now cannot block.
func socketRoom(sock syscall.RawConn) bool {
	queued, ok := surface.SocketCount(sock, unix.SIOCOUTQ)
	return ok && queued+directLimit+wire.MaxDataHeader <= directRoom
}
