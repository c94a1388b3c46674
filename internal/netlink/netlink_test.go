package netlink

import (
	"encoding/binary"
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// A dump of the links over rtnetlink lists the loopback, and a request
// the kernel refuses answers its error: both halves of the protocol, on
// the machine's own kernel.
func TestDumpAndRefusal(t *testing.T) {
	c, err := Dial(unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	links, err := c.Dump(unix.RTM_GETLINK, make([]byte, unix.SizeofIfInfomsg))
	if err != nil {
		t.Fatal(err)
	}
	lo := false
	for _, m := range links {
		if len(m) >= unix.SizeofIfInfomsg && binary.NativeEndian.Uint32(m[8:12])&unix.IFF_LOOPBACK != 0 {
			lo = true
		}
	}
	if !lo {
		t.Fatalf("%d links dumped, none of them the loopback", len(links))
	}
	// Deleting an address of a link that does not exist.
	msg := make([]byte, unix.SizeofIfAddrmsg)
	msg[0], msg[1] = unix.AF_INET, 32
	binary.NativeEndian.PutUint32(msg[4:], 1<<30) // ifindex
	err = c.Do(unix.RTM_DELADDR, 0, msg)
	var errno unix.Errno
	if !errors.As(err, &errno) {
		t.Fatalf("a refused request answered %v, want the kernel's errno", err)
	}
	// The socket goes on after a refusal.
	if _, err := c.Dump(unix.RTM_GETLINK, make([]byte, unix.SizeofIfInfomsg)); err != nil {
		t.Fatalf("dump after a refusal: %v", err)
	}
}
