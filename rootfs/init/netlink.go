package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// errShortReply means the kernel answered with a message we cannot parse.
var errShortReply = errors.New("netlink: short reply")

// rtnl is a minimal rtnetlink client: just enough requests to bring a link
// up, give it an IPv4 address and a default route, each acknowledged.
// The init runs no external tools, so this replaces "ip".
type rtnl struct {
	fd  int
	seq uint32
}

func dialRTNL() (*rtnl, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	return &rtnl{fd: fd}, nil
}

func (c *rtnl) Close() error { return unix.Close(c.fd) }

// setLinkUp sets IFF_UP on the link with the given index.
func (c *rtnl) setLinkUp(index int) error {
	msg := unix.IfInfomsg{Family: unix.AF_UNSPEC, Index: int32(index), Flags: unix.IFF_UP, Change: unix.IFF_UP}
	return c.do(unix.RTM_NEWLINK, 0, structBytes(&msg))
}

// replaceAddr sets an IPv4 address on the link; replacing keeps a second
// run (systemd restarting the unit) from failing with EEXIST.
func (c *rtnl) replaceAddr(index int, p netip.Prefix) error {
	msg := unix.IfAddrmsg{Family: unix.AF_INET, Prefixlen: uint8(p.Bits()), Scope: unix.RT_SCOPE_UNIVERSE, Index: uint32(index)}
	b := structBytes(&msg)
	ip := p.Addr().As4()
	b = appendAttr(b, unix.IFA_LOCAL, ip[:])
	b = appendAttr(b, unix.IFA_ADDRESS, ip[:])
	return c.do(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, b)
}

// replaceDefaultRoute points the main table's IPv4 default route at gw.
func (c *rtnl) replaceDefaultRoute(index int, gw netip.Addr) error {
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
	return c.do(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, b)
}

// do sends one request and waits for its acknowledgement.
func (c *rtnl) do(typ uint16, flags uint16, body []byte) error {
	c.seq++
	hdr := unix.NlMsghdr{
		Len:   uint32(unix.SizeofNlMsghdr + len(body)),
		Type:  typ,
		Flags: unix.NLM_F_REQUEST | unix.NLM_F_ACK | flags,
		Seq:   c.seq,
	}
	req := append(structBytes(&hdr), body...)
	if err := unix.Sendto(c.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink send: %w", err)
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("netlink receive: %w", err)
		}
		done, err := c.ack(buf[:n])
		if done {
			return err
		}
	}
}

// ack looks for the NLMSG_ERROR message answering the current request; an
// error code of zero is the kernel's positive acknowledgement.
func (c *rtnl) ack(b []byte) (bool, error) {
	for len(b) >= unix.SizeofNlMsghdr {
		l := binary.NativeEndian.Uint32(b[0:4])
		typ := binary.NativeEndian.Uint16(b[4:6])
		seq := binary.NativeEndian.Uint32(b[8:12])
		if l < unix.SizeofNlMsghdr || int(l) > len(b) {
			return true, errShortReply
		}
		if typ == unix.NLMSG_ERROR && seq == c.seq {
			if l < unix.SizeofNlMsghdr+4 {
				return true, errShortReply
			}
			code := int32(binary.NativeEndian.Uint32(b[16:20]))
			if code == 0 {
				return true, nil
			}
			return true, unix.Errno(-code)
		}
		b = b[nlmAlign(int(l)):]
	}
	return false, nil
}

func appendAttr(b []byte, typ uint16, data []byte) []byte {
	l := unix.SizeofRtAttr + len(data)
	attr := unix.RtAttr{Len: uint16(l), Type: typ}
	b = append(b, structBytes(&attr)...)
	b = append(b, data...)
	return append(b, make([]byte, nlmAlign(l)-l)...)
}

func nlmAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

// structBytes copies a fixed-size kernel struct into a new byte slice in
// native byte order, which is what netlink speaks.
func structBytes[T any](v *T) []byte {
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))...)
}
