package resume

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// UeventListener reports the kernel's VMGenID change uevents: a "change"
// uevent with NEW_VMGENID=1 on the vmgenid device when the hypervisor
// changes the generation id, as a restore does. Only kernels newer than
// Debian 12's 6.1 send it (6.1 reseeds its RNG from vmgenid but sends no
// uevent, as the VM tests saw): there the clock-jump detector and the
// host's POST notice the restore.
type UeventListener struct {
	f      *os.File
	report func()
	done   chan struct{}
	// fromKernel counts the kernel's messages read (tests).
	fromKernel atomic.Int64
}

// ListenUevents opens a kernel uevent socket and calls report for each
// VMGenID change until Close.
func ListenUevents(report func()) (*UeventListener, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, fmt.Errorf("uevent socket: %w", err)
	}
	// Group 1 carries the kernel's own events (group 2 is udev's copies).
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("uevent bind: %w", err)
	}
	l := &UeventListener{f: os.NewFile(uintptr(fd), "uevent"), report: report, done: make(chan struct{})}
	go l.loop()
	return l, nil
}

func (l *UeventListener) loop() {
	defer close(l.done)
	rc, err := l.f.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 64<<10)
	for {
		var n int
		var from unix.Sockaddr
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, from, rerr = unix.Recvfrom(int(fd), buf, 0)
			return rerr != unix.EAGAIN
		})
		if err == nil {
			err = rerr
		}
		if errors.Is(err, unix.ENOBUFS) {
			// A burst of uevents overflowed the socket: some were lost,
			// but the socket still works and the next ones count.
			continue
		}
		if err != nil {
			return
		}
		l.take(from, buf[:n])
	}
}

// take handles a message from the socket if the kernel sent it (netlink
// port 0): a process with CAP_NET_ADMIN can send to the kernel's group
// too, and a forged VMGenID change would run a whole resume.
func (l *UeventListener) take(from unix.Sockaddr, msg []byte) bool {
	if nl, ok := from.(*unix.SockaddrNetlink); !ok || nl.Pid != 0 {
		return false
	}
	l.fromKernel.Add(1)
	return l.Handle(msg)
}

// Handle takes one raw uevent message, as read from the socket, and
// reports it if it is a VMGenID change. The read loop calls it; tests
// inject messages through it.
func (l *UeventListener) Handle(msg []byte) bool {
	if !IsVMGenIDChange(msg) {
		return false
	}
	l.report()
	return true
}

// Close stops listening.
func (l *UeventListener) Close() {
	l.f.Close()
	<-l.done
}

// IsVMGenIDChange reports whether a raw uevent message (NUL-separated
// "KEY=value" fields after an "action@devpath" header) is a VMGenID change.
func IsVMGenIDChange(msg []byte) bool {
	for _, field := range bytes.Split(msg, []byte{0}) {
		if bytes.Equal(field, []byte("NEW_VMGENID=1")) {
			return true
		}
	}
	return false
}
