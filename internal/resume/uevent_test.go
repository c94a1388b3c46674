package resume

import (
	"os"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestUeventFromUserSpaceIsIgnored: a root process with CAP_NET_ADMIN
// can send a uevent to the kernel's group; a forged VMGenID change from
// it ran a whole resume. Only the kernel's own messages count: a forged
// one is not reported, while a real uevent (a synthetic "change" the
// kernel sends for lo) is still read.
func TestUeventFromUserSpaceIsIgnored(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to send to the kernel's uevent group")
	}
	var reports atomic.Int64
	l, err := ListenUevents(func() { reports.Add(1) })
	if err != nil {
		t.Skipf("no uevent socket: %v", err)
	}
	defer l.Close()
	// The kernel's own message: a synthetic change of lo, which the
	// kernel sends as any uevent.
	if err := os.WriteFile("/sys/class/net/lo/uevent", []byte("change"), 0); err != nil {
		t.Skipf("cannot trigger a kernel uevent: %v", err)
	}
	waitFor(t, "the kernel's uevent", func() bool { return l.fromKernel.Load() > 0 })

	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		t.Fatal(err)
	}
	forged := []byte("change@/devices/platform/QEMUVGID:00\x00ACTION=change\x00DEVPATH=/devices/platform/QEMUVGID:00\x00SUBSYSTEM=platform\x00NEW_VMGENID=1\x00SEQNUM=1\x00")
	if err := unix.Sendto(fd, forged, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		t.Skipf("cannot send to the kernel's group: %v", err)
	}
	// The same bytes from the kernel would be reported: Handle says so.
	if !IsVMGenIDChange(forged) {
		t.Fatal("the forged message is not a VMGenID change: the test proves nothing")
	}
	before := l.fromKernel.Load()
	os.WriteFile("/sys/class/net/lo/uevent", []byte("change"), 0)
	// The forged message was sent first: once the kernel's next one is
	// read, the forged one was read (or dropped) before it.
	waitFor(t, "the kernel's next uevent", func() bool { return l.fromKernel.Load() > before })
	if n := reports.Load(); n != 0 {
		t.Fatalf("a uevent forged by a process was reported %d times", n)
	}
}

// waitFor polls cond until it holds, failing after a bound far above
// what it takes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 20 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
