package resume

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/netlink"
)

// Stale connections. After a long pause, or in a clone, a TCP connection a
// user program opened before the snapshot is dead: its peer forgot it (or,
// in a clone, several copies of the sandbox now hold it, with the same TLS
// keys). The agent resets each one as `ss -K` does, with the kernel's
// SOCK_DESTROY over the sock_diag netlink family (CONFIG_INET_DIAG_DESTROY,
// which Debian's kernel has), so its owner's next read or write fails at
// once instead of hanging. Connections whose peer is this machine
// (loopback, or any address of any of its interfaces) are never touched,
// nor the agent's own.

// Sizes of the sock_diag structures (linux/inet_diag.h).
const (
	inetDiagIDLen  = 48
	inetDiagReqLen = 8 + inetDiagIDLen
	inetDiagMsgLen = 4 + inetDiagIDLen + 20
	tcpEstablished = 1
	tcpListen      = 10
	tcpTimeWait    = 6
	tcpClose       = 7
	staleTCPStates = 0xfff &^ (1<<tcpListen | 1<<tcpTimeWait | 1<<tcpClose | 1)
)

// Conn is a TCP connection the reset found, as last_resume reports it.
type Conn struct {
	Local  string `json:"local"`
	Remote string `json:"remote"`
}

// tcpSock is one socket of the dump: its id (what SOCK_DESTROY names) and
// inode (whose process holds it).
type tcpSock struct {
	family uint8
	id     [inetDiagIDLen]byte
	inode  uint32
	local  netip.AddrPort
	remote netip.AddrPort
}

// ResetStaleTCP destroys every TCP connection to a peer outside this
// machine except those whose socket inode skip names (the agent's own),
// and returns the ones it reset.
func ResetStaleTCP(skip map[uint32]bool) ([]Conn, error) {
	own, err := ownAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing this machine's addresses: %w", err)
	}
	nl, err := netlink.Dial(unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("sock_diag: %w", err)
	}
	defer nl.Close()
	var socks []tcpSock
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		s, err := dumpTCP(nl, family)
		if err != nil {
			return nil, err
		}
		socks = append(socks, s...)
	}
	return resetSocks(nl, socks, func(s tcpSock) bool { return skip[s.inode] || local(s, own) })
}

// resetSocks resets each of socks that keep does not name. A socket gone
// meanwhile (its owner closed it, or it was the peer of one just reset)
// is neither reset nor an error.
func resetSocks(nl *netlink.Conn, socks []tcpSock, keep func(tcpSock) bool) ([]Conn, error) {
	var reset []Conn
	var errs []error
	for _, s := range socks {
		if keep(s) {
			continue
		}
		err := destroyTCP(nl, s)
		if errors.Is(err, unix.EOPNOTSUPP) {
			// A kernel without CONFIG_INET_DIAG_DESTROY: shut the socket
			// down through a copy of its owner's descriptor instead.
			err = shutdownByInode(s.inode)
		}
		if errors.Is(err, unix.ENOENT) || errors.Is(err, errNoHolder) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("resetting %s to %s: %w", s.local, s.remote, err))
			continue
		}
		reset = append(reset, Conn{Local: s.local.String(), Remote: s.remote.String()})
	}
	return reset, errors.Join(errs...)
}

// local reports whether a connection's peer is this machine: loopback, its
// own local address, or any address of any interface (a connection
// between two of the guest's addresses lives and dies with the guest).
func local(s tcpSock, own map[netip.Addr]bool) bool {
	r := s.remote.Addr().Unmap()
	return r.IsLoopback() || r == s.local.Addr().Unmap() || own[r]
}

// ownAddrs is every address of every interface of this machine.
func ownAddrs() (map[netip.Addr]bool, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	own := map[netip.Addr]bool{}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			own[p.Addr().Unmap()] = true
		}
	}
	return own, nil
}

// diagRequest is an inet_diag_req_v2 for TCP in family, of states, naming
// socket id (zero for a dump).
func diagRequest(family uint8, states uint32, id []byte) []byte {
	r := make([]byte, inetDiagReqLen)
	r[0], r[1] = family, unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(r[4:], states)
	copy(r[8:], id)
	return r
}

// dumpTCP lists the TCP sockets of family in the states a reset touches.
func dumpTCP(nl *netlink.Conn, family uint8) ([]tcpSock, error) {
	msgs, err := nl.Dump(unix.SOCK_DIAG_BY_FAMILY, diagRequest(family, staleTCPStates, nil))
	if err != nil {
		return nil, fmt.Errorf("sock_diag dump: %w", err)
	}
	var out []tcpSock
	for _, m := range msgs {
		if len(m) >= inetDiagMsgLen {
			out = append(out, parseDiagMsg(m))
		}
	}
	return out, nil
}

func parseDiagMsg(d []byte) tcpSock {
	s := tcpSock{family: d[0]}
	copy(s.id[:], d[4:4+inetDiagIDLen])
	s.inode = binary.NativeEndian.Uint32(d[4+inetDiagIDLen+16:])
	id := s.id[:]
	sport, dport := binary.BigEndian.Uint16(id[0:]), binary.BigEndian.Uint16(id[2:])
	var src, dst netip.Addr
	if s.family == unix.AF_INET {
		src, dst = netip.AddrFrom4([4]byte(id[4:8])), netip.AddrFrom4([4]byte(id[20:24]))
	} else {
		src, dst = netip.AddrFrom16([16]byte(id[4:20])), netip.AddrFrom16([16]byte(id[20:36]))
	}
	s.local, s.remote = netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport)
	return s
}

// destroyTCP asks the kernel to reset one socket (SOCK_DESTROY).
func destroyTCP(nl *netlink.Conn, s tcpSock) error {
	return nl.Do(unix.SOCK_DESTROY, 0, diagRequest(s.family, 0xffffffff, s.id[:]))
}

// OwnSocketInodes are the inodes of the sockets this process holds.
func OwnSocketInodes() map[uint32]bool {
	m := map[uint32]bool{}
	dir := "/proc/self/fd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return m
	}
	for _, e := range entries {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if rest, ok := strings.CutPrefix(link, "socket:["); ok {
			if n, err := strconv.ParseUint(strings.TrimSuffix(rest, "]"), 10, 32); err == nil {
				m[uint32(n)] = true
			}
		}
	}
	return m
}

// shutdownByInode shuts down (both ways) the socket with this inode,
// through a copy of a descriptor of it that some process holds
// (pidfd_getfd): its owner's reads return end of file and its writes
// fail. The fallback where SOCK_DESTROY is missing.
func shutdownByInode(inode uint32) error {
	want := "socket:[" + strconv.FormatUint(uint64(inode), 10) + "]"
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", p.Name(), "fd")
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, f := range fds {
			if link, err := os.Readlink(filepath.Join(dir, f.Name())); err != nil || link != want {
				continue
			}
			target, _ := strconv.Atoi(f.Name())
			pidfd, err := unix.PidfdOpen(pid, 0)
			if err != nil {
				return fmt.Errorf("pidfd_open %d: %w", pid, err)
			}
			dup, err := unix.PidfdGetfd(pidfd, target, 0)
			unix.Close(pidfd)
			if err != nil {
				return fmt.Errorf("pidfd_getfd %d/%d: %w", pid, target, err)
			}
			defer unix.Close(dup)
			return unix.Shutdown(dup, unix.SHUT_RDWR)
		}
	}
	return fmt.Errorf("%w %d", errNoHolder, inode)
}

// errNoHolder: no process holds the socket any more.
var errNoHolder = errors.New("no process holds socket")
