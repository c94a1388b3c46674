package resume

import (
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
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
