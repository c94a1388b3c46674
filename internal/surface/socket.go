package surface

import (
	"errors"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// RawSocket is the socket under c (through wrappers that give their
// NetConn, as the connection limiter's does), nil if it has none (a
// pipe): a session without one never writes from a producer's goroutine.
func RawSocket(c net.Conn) syscall.RawConn {
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

// SocketCount asks the kernel for a count of sock's (SIOCINQ: bytes the
// server has not read; SIOCOUTQ: bytes the peer has not acknowledged);
// false when sock is nil or the kernel does not answer.
func SocketCount(sock syscall.RawConn, req uint) (int, bool) {
	if sock == nil {
		return 0, false
	}
	n, err := 0, error(nil)
	if cerr := sock.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), req) }); cerr != nil || err != nil {
		return 0, false
	}
	return n, true
}

// ConnFile is a descriptor of c's socket of its own (close-on-exec), to
// hand c over to another binary; c stays open.
func ConnFile(c net.Conn) (*os.File, error) {
	raw := RawSocket(c)
	if raw == nil {
		return nil, errors.New("not a socket")
	}
	nfd := -1
	var derr error
	if err := raw.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	return os.NewFile(uintptr(nfd), "socket"), nil
}
