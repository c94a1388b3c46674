package endpoint

import (
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/surface"
)

// TestSocketRoom: a socket whose peer stopped reading has no room for a
// producer's write; once the peer has read everything, it has.
func TestSocketRoom(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return nil
	}}
	peer, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sock := surface.RawSocket(c)
	if surface.RawSocket(wrapped{c}) == nil {
		t.Fatal("no socket found under a wrapper that gives its NetConn")
	}
	if !socketRoom(sock) {
		t.Fatal("an idle connection's socket has no room")
	}
	// The peer does not read: write until a write would block.
	buf := make([]byte, 64<<10)
	for {
		c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Write(buf); err != nil {
			break
		}
	}
	if socketRoom(sock) {
		t.Fatal("a socket whose peer stopped reading has room")
	}
	// The peer reads everything there is; the socket empties.
	go func() {
		b := make([]byte, 64<<10)
		for {
			if _, err := peer.Read(b); err != nil {
				return
			}
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !socketRoom(sock) {
		if time.Now().After(deadline) {
			t.Fatal("the socket has no room after the peer read everything")
		}
		time.Sleep(time.Millisecond)
	}
	if socketRoom(surface.RawSocket(nil)) {
		t.Fatal("a connection without a socket has room")
	}
}

// wrapped hides its connection's socket but gives it through NetConn, as
// the connection limiter's wrapper does.
type wrapped struct{ c net.Conn }

func (w wrapped) NetConn() net.Conn { return w.c }

// The rest of net.Conn is not needed: RawSocket looks for NetConn first.
func (w wrapped) Read(p []byte) (int, error)         { return w.c.Read(p) }
func (w wrapped) Write(p []byte) (int, error)        { return w.c.Write(p) }
func (w wrapped) Close() error                       { return w.c.Close() }
func (w wrapped) LocalAddr() net.Addr                { return w.c.LocalAddr() }
func (w wrapped) RemoteAddr() net.Addr               { return w.c.RemoteAddr() }
func (w wrapped) SetDeadline(t time.Time) error      { return w.c.SetDeadline(t) }
func (w wrapped) SetReadDeadline(t time.Time) error  { return w.c.SetReadDeadline(t) }
func (w wrapped) SetWriteDeadline(t time.Time) error { return w.c.SetWriteDeadline(t) }
