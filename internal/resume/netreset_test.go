package resume

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/netlink"
)

// The sock_diag half of the stale-connection reset on this machine's
// kernel: the dump finds a TCP connection (loopback here, which the reset
// itself leaves alone) with its addresses and inode, and SOCK_DESTROY
// resets it: its owner's read fails at once.
func TestDumpAndDestroyTCP(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	conn, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	peer, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	local := netip.MustParseAddrPort(conn.LocalAddr().String())
	remote := netip.MustParseAddrPort(conn.RemoteAddr().String())

	nl, err := netlink.Dial(unix.NETLINK_SOCK_DIAG)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	socks, err := dumpTCP(nl, unix.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	var found *tcpSock
	for i, s := range socks {
		if s.local == local && s.remote == remote {
			found = &socks[i]
		}
		if s.local == netip.MustParseAddrPort(l.Addr().String()) && s.remote.Port() == 0 {
			t.Errorf("the dump lists the listener %s: listening sockets are never reset", s.local)
		}
	}
	if found == nil {
		t.Fatalf("the dump (%d sockets) does not list %s to %s", len(socks), local, remote)
	}
	if !OwnSocketInodes()[found.inode] {
		t.Fatalf("inode %d of the connection is not among this process's sockets", found.inode)
	}
	err = destroyTCP(nl, *found)
	switch {
	case errors.Is(err, unix.EOPNOTSUPP):
		t.Skip("this kernel has no SOCK_DESTROY (CONFIG_INET_DIAG_DESTROY)")
	case errors.Is(err, unix.EPERM):
		t.Skip("SOCK_DESTROY needs CAP_NET_ADMIN")
	}
	if err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil || errors.Is(err, unix.EAGAIN) || isTimeout(err) {
		t.Fatalf("read of a destroyed connection: %v, want it reset", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
