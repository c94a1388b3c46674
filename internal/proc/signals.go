package proc

import (
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/wire"
)

// signalsByName are the signals a client may send, from the protocol.
var signalsByName = map[string]syscall.Signal{
	"SIGTERM": syscall.SIGTERM,
	"SIGKILL": syscall.SIGKILL,
	"SIGINT":  syscall.SIGINT,
	"SIGHUP":  syscall.SIGHUP,
	"SIGQUIT": syscall.SIGQUIT,
	"SIGUSR1": syscall.SIGUSR1,
	"SIGUSR2": syscall.SIGUSR2,
	"SIGSTOP": syscall.SIGSTOP,
	"SIGCONT": syscall.SIGCONT,
}

// ParseSignal maps a protocol signal name to the signal.
func ParseSignal(name string) (syscall.Signal, error) {
	if s, ok := signalsByName[name]; ok {
		return s, nil
	}
	return 0, wire.Errorf(wire.CodeBadRequest, "unknown signal %q (want one of SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGSTOP, SIGCONT)", name)
}

// SignalName is the name of any signal, as reported in `end` events:
// SIGKILL, or for one without a name (a real-time signal) SIGRT and its
// number, SIGRT41.
func SignalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return "SIGRT" + strconv.Itoa(int(s))
}

// ignoreGone treats a process or group that no longer exists as done.
func ignoreGone(err error) error {
	if err == syscall.ESRCH {
		return nil
	}
	return err
}
