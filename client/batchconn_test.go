package client

import (
	"io"
	"net"
	"testing"
	"time"
)

// countingConn records each write that reaches the connection.
type countingConn struct {
	net.Conn
	writes [][]byte
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes = append(c.writes, append([]byte(nil), p...))
	return len(p), nil
}

func (c *countingConn) SetWriteDeadline(time.Time) error { return nil }

// TestBatchConn: writes inside begin and end reach the connection as one
// write, in order, when the outermost end comes; writes outside go
// straight through.
func TestBatchConn(t *testing.T) {
	cc := &countingConn{}
	b := &batchConn{Conn: cc}
	b.Write([]byte("direct"))
	b.begin()
	b.Write([]byte("a"))
	b.begin() // a second frame waits for the first
	b.Write([]byte("b"))
	if err := b.end(time.Second); err != nil || len(cc.writes) != 1 {
		t.Fatalf("flushed before the last end: %q, %v", cc.writes, err)
	}
	b.Write([]byte("c")) // the library's own frame, while one is open
	if err := b.end(time.Second); err != nil {
		t.Fatal(err)
	}
	if len(cc.writes) != 2 || string(cc.writes[0]) != "direct" || string(cc.writes[1]) != "abc" {
		t.Fatalf("writes %q", cc.writes)
	}
	b.begin()
	if err := b.end(time.Second); err != nil || len(cc.writes) != 2 {
		t.Fatalf("an empty batch wrote %q, %v", cc.writes, err)
	}
}

// TestBatchConnFailedFlush: a flush that fails closes the connection.
func TestBatchConnFailedFlush(t *testing.T) {
	c1, c2 := net.Pipe()
	c2.Close()
	b := &batchConn{Conn: c1}
	b.begin()
	b.Write([]byte("x"))
	if err := b.end(time.Second); err == nil {
		t.Fatal("a write to a closed peer succeeded")
	}
	if _, err := c1.Read(make([]byte, 1)); err != io.ErrClosedPipe {
		t.Fatalf("connection still open: %v", err)
	}
}
