package endpoint

import (
	"net"
	"syscall"
	"testing"
	"time"
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
	sock := rawSocket(c)
	if rawSocket(&conn{Conn: c}) == nil {
		t.Fatal("no socket found under the connection limiter's wrapper")
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
	if socketRoom(rawSocket(nil)) {
		t.Fatal("a connection without a socket has room")
	}
}
