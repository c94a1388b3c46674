// Package netconf configures the guest's network over rtnetlink, without
// external tools: the init brings a link up with its address and default
// route at boot, and the agent repairs and changes them after a resume
// (repair.go).
package netconf

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/netlink"
)

// RTNL is a minimal rtnetlink client: just enough requests to bring a
// link up, give it an IPv4 address and a default route, and forget its
// neighbours, each acknowledged. It replaces "ip".
type RTNL struct {
	c *netlink.Conn
}

// Dial opens an rtnetlink socket.
func Dial() (*RTNL, error) {
	c, err := netlink.Dial(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	return &RTNL{c: c}, nil
}

// Close closes the socket.
func (c *RTNL) Close() error { return c.c.Close() }

// SetLinkUp sets IFF_UP on the link with the given index.
func (c *RTNL) SetLinkUp(index int) error {
	msg := unix.IfInfomsg{Family: unix.AF_UNSPEC, Index: int32(index), Flags: unix.IFF_UP, Change: unix.IFF_UP}
	return c.c.Do(unix.RTM_NEWLINK, 0, structBytes(&msg))
}

// ReplaceAddr sets an IPv4 address on the link; replacing keeps a second
// run (systemd restarting the unit) from failing with EEXIST.
func (c *RTNL) ReplaceAddr(index int, p netip.Prefix) error {
	msg := unix.IfAddrmsg{Family: unix.AF_INET, Prefixlen: uint8(p.Bits()), Scope: unix.RT_SCOPE_UNIVERSE, Index: uint32(index)}
	b := structBytes(&msg)
	ip := p.Addr().As4()
	b = appendAttr(b, unix.IFA_LOCAL, ip[:])
	b = appendAttr(b, unix.IFA_ADDRESS, ip[:])
	return c.c.Do(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, b)
}

// ReplaceDefaultRoute points the main table's IPv4 default route at gw.
func (c *RTNL) ReplaceDefaultRoute(index int, gw netip.Addr) error {
	msg := unix.RtMsg{
		Family:   unix.AF_INET,
		Table:    unix.RT_TABLE_MAIN,
		Protocol: unix.RTPROT_BOOT,
		Scope:    unix.RT_SCOPE_UNIVERSE,
		Type:     unix.RTN_UNICAST,
	}
	b := structBytes(&msg)
	ip := gw.As4()
	b = appendAttr(b, unix.RTA_GATEWAY, ip[:])
	oif := make([]byte, 4)
	binary.NativeEndian.PutUint32(oif, uint32(index))
	b = appendAttr(b, unix.RTA_OIF, oif)
	return c.c.Do(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, b)
}

func appendAttr(b []byte, typ uint16, data []byte) []byte {
	l := unix.SizeofRtAttr + len(data)
	attr := unix.RtAttr{Len: uint16(l), Type: typ}
	b = append(b, structBytes(&attr)...)
	b = append(b, data...)
	return append(b, make([]byte, netlink.Align(l)-l)...)
}

// structBytes copies a fixed-size kernel struct into a new byte slice in
// native byte order, which is what netlink speaks.
func structBytes[T any](v *T) []byte {
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))...)
}

// DeleteAddr removes an IPv4 address from the link.
func (c *RTNL) DeleteAddr(index int, p netip.Prefix) error {
	msg := unix.IfAddrmsg{Family: unix.AF_INET, Prefixlen: uint8(p.Bits()), Index: uint32(index)}
	b := structBytes(&msg)
	ip := p.Addr().As4()
	b = appendAttr(b, unix.IFA_LOCAL, ip[:])
	return c.c.Do(unix.RTM_DELADDR, 0, b)
}

// FlushNeighbours forgets the IPv4 neighbours the link has learned (as
// `ip neigh flush dev`), keeping permanent ones, and says how many.
func (c *RTNL) FlushNeighbours(index int) (int, error) {
	msg := unix.NdMsg{Family: unix.AF_INET, Ifindex: int32(index)}
	msgs, err := c.c.Dump(unix.RTM_GETNEIGH, structBytes(&msg))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range msgs {
		if len(m) < unix.SizeofNdMsg {
			continue
		}
		idx := int32(binary.NativeEndian.Uint32(m[4:8]))
		state := binary.NativeEndian.Uint16(m[8:10])
		if int(idx) != index || state&(unix.NUD_PERMANENT|unix.NUD_NOARP) != 0 {
			continue
		}
		dst := attr(m[unix.SizeofNdMsg:], unix.NDA_DST)
		if dst == nil {
			continue
		}
		del := unix.NdMsg{Family: unix.AF_INET, Ifindex: int32(index)}
		if err := c.c.Do(unix.RTM_DELNEIGH, 0, appendAttr(structBytes(&del), unix.NDA_DST, dst)); err != nil && !errors.Is(err, unix.ENOENT) {
			return n, err
		}
		n++
	}
	return n, nil
}

// attr finds an attribute's data among rtattrs.
func attr(b []byte, typ uint16) []byte {
	for len(b) >= unix.SizeofRtAttr {
		l := binary.NativeEndian.Uint16(b[0:2])
		t := binary.NativeEndian.Uint16(b[2:4])
		if l < unix.SizeofRtAttr || int(l) > len(b) {
			return nil
		}
		if t == typ {
			return b[unix.SizeofRtAttr:l]
		}
		b = b[netlink.Align(int(l)):]
	}
	return nil
}
