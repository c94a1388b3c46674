package resume

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/netlink"
)

// inodeOf is the inode of a connection's socket.
func inodeOf(t *testing.T, c *net.TCPConn) uint32 {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var inode uint32
	raw.Control(func(fd uintptr) {
		link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(fd)))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]"), 10, 32)
		inode = uint32(n)
	})
	return inode
}

// TestShutdownByInode: the fallback reset, where SOCK_DESTROY is missing,
// shuts a socket down through a copy of its owner's descriptor: a read
// blocked on it returns end of file. (The reset itself, which acts on
// every connection of the machine, runs in the VM: rootfs/e2e.)
func TestShutdownByInode(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			time.Sleep(time.Minute)
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	if err := shutdownByInode(inodeOf(t, c.(*net.TCPConn))); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-read:
		if err != io.EOF {
			t.Errorf("the blocked read returned %v, want EOF", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the blocked read did not return after the shutdown")
	}
	if err := shutdownByInode(1); err == nil || !strings.Contains(err.Error(), "no process holds socket 1") {
		t.Errorf("an inode nobody holds: %v", err)
	}
}

// The sock_diag half of the stale-connection reset on this machine's
// kernel: the dump finds a TCP connection (loopback here, which the reset
// itself leaves alone) with its addresses and inode, and SOCK_DESTROY
// resets it: its owner's read fails at once.
func TestDumpAndDestroyTCP(t *testing.T) {
	l, conn, _, nl := loopbackConn(t)
	local := netip.MustParseAddrPort(conn.LocalAddr().String())
	remote := netip.MustParseAddrPort(conn.RemoteAddr().String())
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
	if want := inodeOf(t, conn.(*net.TCPConn)); found.inode != want {
		t.Fatalf("the dump gives the connection inode %d, its descriptor %d", found.inode, want)
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

// inNewNetns runs f on a thread of its own in a new network namespace
// with lo up and the given addresses on it; the thread is thrown away
// after. It skips without the rights to make one.
func inNewNetns(t *testing.T, addrs []string, f func()) {
	t.Helper()
	done := make(chan any)
	go func() {
		defer close(done)
		// Never unlocked: the thread, in its own namespace, ends with
		// the goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- "unshare: " + err.Error()
			return
		}
		cmds := [][]string{{"link", "set", "lo", "up"}}
		for _, a := range addrs {
			cmds = append(cmds, []string{"addr", "add", a + "/32", "dev", "lo"})
		}
		for _, args := range cmds {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				done <- fmt.Sprintf("ip %v: %v: %s", args, err, out)
				return
			}
		}
		f()
	}()
	if msg, ok := <-done; ok {
		t.Skipf("no network namespace of the test's own: %v", msg)
	}
}

// TestResetLeavesTheGuestsOwnAddresses: a connection between two of the
// machine's own addresses (10.9.0.1 to 10.9.0.2, both on lo) is not a
// connection to another machine: the reset leaves it (and its peer)
// alone, and reports no error.
func TestResetLeavesTheGuestsOwnAddresses(t *testing.T) {
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2)")
	}
	inNewNetns(t, []string{"10.9.0.1", "10.9.0.2"}, func() {
		l, err := net.Listen("tcp4", "10.9.0.2:0")
		if err != nil {
			t.Error(err)
			return
		}
		defer l.Close()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("10.9.0.1")}}
		conn, err := d.Dial("tcp4", l.Addr().String())
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		peer, err := l.Accept()
		if err != nil {
			t.Error(err)
			return
		}
		defer peer.Close()
		reset, err := ResetStaleTCP(nil)
		if errors.Is(err, unix.EPERM) {
			t.Log("SOCK_DESTROY needs CAP_NET_ADMIN")
		}
		if err != nil || len(reset) != 0 {
			t.Errorf("the reset of a connection within the machine: reset %v, error %v", reset, err)
		}
		conn.Write([]byte("x"))
		peer.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := peer.Read(make([]byte, 1)); err != nil {
			t.Errorf("the connection after the reset: %v", err)
		}
	})
}

// TestResetOfAGoneSocketIsNoError: a socket that went away between the
// dump and its reset (here, both ends of a connection one of which was
// reset just before) is neither reported reset nor an error.
func TestResetOfAGoneSocketIsNoError(t *testing.T) {
	_, conn, peer, nl := loopbackConn(t)
	socks, err := dumpTCP(nl, unix.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	ours := map[netip.AddrPort]bool{netip.MustParseAddrPort(conn.LocalAddr().String()): true, netip.MustParseAddrPort(peer.LocalAddr().String()): true}
	var pair []tcpSock
	for _, s := range socks {
		if ours[s.local] && ours[s.remote] {
			pair = append(pair, s)
		}
	}
	if len(pair) != 2 {
		t.Fatalf("the dump has %d ends of the connection, want 2", len(pair))
	}
	conn.Close() // gone: its socket leaves the tables at once (an RST, then closed)
	peer.(*net.TCPConn).SetLinger(0)
	peer.Close()
	reset, err := resetSocks(nl, pair, func(tcpSock) bool { return false })
	if err != nil || len(reset) != 0 {
		t.Fatalf("resetting two sockets already gone: reset %v, error %v", reset, err)
	}
}

// loopbackConn is a TCP connection on 127.0.0.1 (its listener, both ends)
// and a sock_diag socket, all closed when the test ends.
func loopbackConn(t *testing.T) (l net.Listener, conn, peer net.Conn, nl *netlink.Conn) {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if conn, err = net.Dial("tcp4", l.Addr().String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if peer, err = l.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	if nl, err = netlink.Dial(unix.NETLINK_SOCK_DIAG); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nl.Close() })
	return l, conn, peer, nl
}

// TestLocalTellsTheMachineFromOthers: the reset's filter keeps what
// lives and dies with the guest (loopback, the socket's own address, any
// address of the machine, in either family's spelling) and nothing else.
func TestLocalTellsTheMachineFromOthers(t *testing.T) {
	own := map[netip.Addr]bool{netip.MustParseAddr("10.0.2.15"): true, netip.MustParseAddr("fd00::15"): true}
	conn := func(local, remote string) tcpSock {
		return tcpSock{local: netip.MustParseAddrPort(local), remote: netip.MustParseAddrPort(remote)}
	}
	for _, c := range []struct {
		s    tcpSock
		keep bool
		what string
	}{
		{conn("127.0.0.1:5432", "127.0.0.1:40000"), true, "loopback"},
		{conn("[::1]:5432", "[::1]:40000"), true, "IPv6 loopback"},
		{conn("10.0.2.15:40000", "10.0.2.15:5432"), true, "the guest's own address, to its own database"},
		{conn("[::ffff:10.0.2.15]:40000", "[::ffff:10.0.2.15]:5432"), true, "the same, IPv4-mapped"},
		{conn("172.17.0.1:40000", "10.0.2.15:5432"), true, "another of the guest's addresses"},
		{conn("[fd00::16]:40000", "[fd00::15]:5432"), true, "an IPv6 address of the guest"},
		{conn("10.0.2.15:40000", "93.184.216.34:443"), false, "a server elsewhere"},
		{conn("10.0.2.15:49983", "10.0.2.2:51000"), false, "the host's gateway"},
		{conn("[fd00::15]:40000", "[2606:4700::1]:443"), false, "a server elsewhere, IPv6"},
		{conn("[::ffff:10.0.2.15]:40000", "[::ffff:93.184.216.34]:443"), false, "a server elsewhere, IPv4-mapped"},
	} {
		if got := local(c.s, own); got != c.keep {
			t.Errorf("%s (%s to %s): local %v, want %v", c.what, c.s.local, c.s.remote, got, c.keep)
		}
	}
}
