// Package netlink speaks the kernel's netlink protocol, one request at a
// time, on a socket of any netlink family: a request the kernel
// acknowledges (Do) or a dump (Dump). netconf configures the network over
// it (rtnetlink) and the resume resets stale TCP connections over it
// (sock_diag); both only build and read the messages' bodies.
package netlink

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ErrShortReply means the kernel answered with a message we cannot parse.
var ErrShortReply = errors.New("netlink: short reply")

// Conn is a netlink socket of one family.
type Conn struct {
	fd  int
	seq uint32
}

// Dial opens and binds a netlink socket of the family proto
// (unix.NETLINK_ROUTE, unix.NETLINK_SOCK_DIAG, ...).
func Dial(proto int) (*Conn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	return &Conn{fd: fd}, nil
}

// Close closes the socket.
func (c *Conn) Close() error { return unix.Close(c.fd) }

// send writes one request of type typ with body.
func (c *Conn) send(typ uint16, flags uint16, body []byte) error {
	c.seq++
	b := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(b[0:], uint32(unix.SizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	binary.NativeEndian.PutUint16(b[6:], unix.NLM_F_REQUEST|flags)
	binary.NativeEndian.PutUint32(b[8:], c.seq)
	if err := unix.Sendto(c.fd, append(b, body...), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink send: %w", err)
	}
	return nil
}

// receive reads the next datagram of the answer into buf.
func (c *Conn) receive(buf []byte) ([]byte, error) {
	for {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("netlink receive: %w", err)
		}
		return buf[:n], nil
	}
}

// Do sends one request and waits for the kernel's acknowledgement: nil,
// or the error it answered with (a unix.Errno).
func (c *Conn) Do(typ uint16, flags uint16, body []byte) error {
	if err := c.send(typ, unix.NLM_F_ACK|flags, body); err != nil {
		return err
	}
	buf := make([]byte, 8192)
	for {
		b, err := c.receive(buf)
		if err != nil {
			return err
		}
		for len(b) >= unix.SizeofNlMsghdr {
			l, typ, seq := header(b)
			if l < unix.SizeofNlMsghdr || int(l) > len(b) {
				return ErrShortReply
			}
			if typ == unix.NLMSG_ERROR && seq == c.seq {
				return errorCode(b[unix.SizeofNlMsghdr:l])
			}
			b = b[Align(int(l)):]
		}
	}
}

// Dump sends a dump request and returns the body of each message of the
// answer, or the error the kernel answered with.
func (c *Conn) Dump(typ uint16, body []byte) ([][]byte, error) {
	if err := c.send(typ, unix.NLM_F_DUMP, body); err != nil {
		return nil, err
	}
	var out [][]byte
	buf := make([]byte, 1<<16)
	for {
		b, err := c.receive(buf)
		if err != nil {
			return nil, err
		}
		for len(b) >= unix.SizeofNlMsghdr {
			l, typ, _ := header(b)
			if l < unix.SizeofNlMsghdr || int(l) > len(b) {
				return nil, ErrShortReply
			}
			switch typ {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if err := errorCode(b[unix.SizeofNlMsghdr:l]); err != nil {
					return nil, err
				}
			default:
				out = append(out, append([]byte(nil), b[unix.SizeofNlMsghdr:l]...))
			}
			b = b[Align(int(l)):]
		}
	}
}

// header reads a message header's length, type and sequence number.
func header(b []byte) (length uint32, typ uint16, seq uint32) {
	return binary.NativeEndian.Uint32(b[0:4]), binary.NativeEndian.Uint16(b[4:6]), binary.NativeEndian.Uint32(b[8:12])
}

// errorCode reads an NLMSG_ERROR's code: zero is an acknowledgement.
func errorCode(body []byte) error {
	if len(body) < 4 {
		return ErrShortReply
	}
	if code := int32(binary.NativeEndian.Uint32(body)); code != 0 {
		return unix.Errno(-code)
	}
	return nil
}

// Align rounds a length up to netlink's alignment.
func Align(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }
