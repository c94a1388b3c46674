package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/netconf"
)

// TestConfigureNetwork runs the real netlink setup in a new network
// namespace, on a veth named eth0, twice (systemd may restart the unit).
func TestConfigureNetwork(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	reaper := testReaper(t)
	errs := make(chan error, 1)
	go func() {
		// The namespace belongs to this thread only; the thread is
		// thrown away with the goroutine because it is never unlocked.
		runtime.LockOSThread()
		errs <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				return err
			}
			if err := runTool(reaper, "/usr/sbin/ip", "link", "add", "eth0", "type", "veth", "peer", "name", "peer0"); err != nil {
				return err
			}
			if err := runTool(reaper, "/usr/sbin/ip", "link", "set", "peer0", "up"); err != nil {
				return err
			}
			nc := parseCmdline("").Net
			log := zaptest.NewLogger(t)
			for i := 0; i < 2; i++ {
				if err := configureNetwork(nc, log); err != nil {
					return err
				}
			}
			checkNetwork(t)
			return checkNetlinkError()
		}()
	}()
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// checkNetwork asserts what "ip addr" and "ip route" would show; it must
// run on the namespaced thread.
func checkNetwork(t *testing.T) {
	for _, name := range []string{"lo", "eth0"} {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if ifc.Flags&net.FlagUp == 0 {
			t.Errorf("%s is down", name)
		}
	}
	ifc, err := net.InterfaceByName("eth0")
	if err != nil {
		return
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) == 0 || addrs[0].String() != "10.0.2.15/24" {
		t.Errorf("eth0 addresses %v, want [10.0.2.15/24]", addrs)
	}
	// /proc/thread-self: the route table of this thread's namespace.
	b, err := os.ReadFile("/proc/thread-self/net/route")
	if err != nil {
		t.Fatal(err)
	}
	// Iface Destination Gateway ... in little-endian hex: 0.0.0.0 via 10.0.2.2.
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[0] == "eth0" && f[1] == "00000000" && f[2] == "0202000A" {
			found++
		}
	}
	if found != 1 {
		t.Errorf("want one default route via 10.0.2.2 on eth0; routes:\n%s", b)
	}
}

// checkNetlinkError makes the kernel refuse a request: a gateway that is
// not on any link. The errno must come back from the acknowledgement.
func checkNetlinkError() error {
	c, err := netconf.Dial()
	if err != nil {
		return err
	}
	defer c.Close()
	ifc, err := net.InterfaceByName("eth0")
	if err != nil {
		return err
	}
	err = c.ReplaceDefaultRoute(ifc.Index, netip.MustParseAddr("192.168.77.1"))
	if !errors.Is(err, unix.ENETUNREACH) {
		return fmt.Errorf("route via an off-link gateway: err = %v, want ENETUNREACH", err)
	}
	return nil
}
