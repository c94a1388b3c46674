package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/mdlayher/vsock"
	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/handover"
)

// handoverFault is empty in every build but the tests' (-ldflags "-X
// main.handoverFault=..."): "adopt" makes the binary fail as it takes
// over, "check" makes its handover-check print nonsense. The failure
// paths are then tested with a real binary, as an upgrade meets them.
var handoverFault = ""

// handoverCheckCmd is what an agent asks a new binary before it lets go
// (handover.ProbeBinary): its version and the formats it reads.
func handoverCheckCmd(args []string) int {
	fs := commandFlags(handover.CheckCommand, os.Stderr)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if handoverFault == "check" {
		fmt.Println("not a probe")
		return 0
	}
	json.NewEncoder(os.Stdout).Encode(handover.Self(version))
	return 0
}

// listenerKey names listener i of --listen (addr) in a handover; the
// code interpreter's is "ci".
func listenerKey(i string, addr string) string { return "listener/" + i + ":" + addr }

// listenCarried is listen for addr, or the listener an upgrade carried
// under key.
func listenCarried(hs *handover.State, key, addr string) (net.Listener, error) {
	if hs != nil {
		f, err := hs.Dup(key)
		if err != nil {
			return nil, err
		}
		if f != nil {
			defer f.Close()
			if strings.HasPrefix(addr, "vsock://") {
				return vsock.FileListener(f)
			}
			return net.FileListener(f)
		}
	}
	return listen(addr)
}

// carryListeners puts every listener in an upgrade's state, so that
// clients connecting during the swap wait in its backlog.
func carryListeners(s *handover.State, keys []string, ls []net.Listener) error {
	for i, l := range ls {
		f, err := listenerFile(l)
		if err != nil {
			return fmt.Errorf("carrying %s: %w", listenAddr(l), err)
		}
		s.PutFile(keys[i], f)
	}
	return nil
}

// listenerFile is a descriptor of l's socket.
func listenerFile(l net.Listener) (*os.File, error) {
	switch l := l.(type) {
	case *net.TCPListener:
		return l.File()
	case *vsock.Listener:
		return vsockFile(l)
	}
	return nil, errors.New("not a TCP or vsock listener")
}

// vsockFile is a descriptor of l's socket, found by its address: the
// vsock package keeps its own to itself.
func vsockFile(l *vsock.Listener) (*os.File, error) {
	a, ok := l.Addr().(*vsock.Addr)
	if !ok {
		return nil, errors.New("not a vsock address")
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		sa, err := unix.Getsockname(fd)
		vm, isVM := sa.(*unix.SockaddrVM)
		if err != nil || !isVM || vm.Port != a.Port {
			continue
		}
		if acc, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err == nil && acc == 1 {
			nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				return nil, err
			}
			return os.NewFile(uintptr(nfd), "vsock"), nil
		}
	}
	return nil, fmt.Errorf("no listening socket on vsock port %d", a.Port)
}
