package main

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mdlayher/vsock"
	"golang.org/x/sys/unix"
)

// startupError is a failure to start that a person fixes, such as a busy
// port: serve prints it as one plain line, not as a log record.
type startupError struct{ msg string }

func (e *startupError) Error() string { return e.msg }

// listen opens one of the endpoint's addresses first thing, so a busy
// port stops the agent before it touches its state directory or starts
// anything: host:port for TCP, vsock://:PORT for vsock (any CID).
func listen(addr string) (net.Listener, error) {
	if rest, ok := strings.CutPrefix(addr, "vsock://"); ok {
		return listenVsock(addr, rest)
	}
	l, err := net.Listen("tcp", addr)
	switch {
	case err == nil:
		return l, nil
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, &startupError{fmt.Sprintf("%s is already in use (another agent running?); %s", addr, pickAnother("address"))}
	case errors.Is(err, syscall.EACCES):
		return nil, &startupError{fmt.Sprintf("not allowed to listen on %s (a port below 1024 needs root or CAP_NET_BIND_SERVICE)", addr)}
	}
	return nil, &startupError{fmt.Sprintf("cannot listen on %s: %v", addr, err)}
}

// listenVsock listens on vsock port PORT of any CID: the host (or, with
// vsock_loopback, the guest itself) reaches the agent without a network
// device.
func listenVsock(addr, rest string) (net.Listener, error) {
	cid, portS, ok := strings.Cut(rest, ":")
	port, err := strconv.ParseUint(portS, 10, 32)
	// 0 and 2^32-1 (VMADDR_PORT_ANY) make the kernel pick a port: a host
	// could not know where to connect.
	if !ok || cid != "" || err != nil || port == 0 || port == 1<<32-1 {
		return nil, &startupError{fmt.Sprintf("bad vsock address %q: want vsock://:PORT (any CID, PORT from 1 to 4294967294), such as vsock://:49983", addr)}
	}
	l, err := vsock.Listen(uint32(port), nil)
	if err == nil {
		return l, nil
	}
	return nil, vsockListenError(addr, err)
}

// vsockListenError says what to do about a vsock listener that failed.
func vsockListenError(addr string, err error) error {
	switch {
	case errors.Is(err, syscall.EAFNOSUPPORT), errors.Is(err, syscall.ENODEV), errors.Is(err, syscall.ESOCKTNOSUPPORT):
		return &startupError{fmt.Sprintf("cannot listen on %s: this machine has no vsock transport (AF_VSOCK: load vmw_vsock_virtio_transport, or vsock_loopback for a guest-local test): %v", addr, err)}
	case errors.Is(err, syscall.EADDRINUSE):
		return &startupError{fmt.Sprintf("%s is already in use (another agent running?); %s", addr, pickAnother("port"))}
	}
	return &startupError{fmt.Sprintf("cannot listen on %s: %v", addr, err)}
}

// pickAnother says how to choose another listen address: with make's
// LISTEN variable when make started the agent (make run sets MAKELEVEL in
// its commands' environment), else with the flag or its variable.
func pickAnother(what string) string {
	if os.Getenv("MAKELEVEL") != "" {
		return "pick another " + what + " with make run LISTEN=127.0.0.1:PORT"
	}
	return "pick another " + what + " with --listen or RAYITO_LISTEN"
}

// listenAddr names a listener in logs as --listen would.
func listenAddr(l net.Listener) string {
	if a, ok := l.Addr().(*vsock.Addr); ok {
		return fmt.Sprintf("vsock://%d:%d", a.ContextID, a.Port)
	}
	return l.Addr().String()
}

// exposed lists the listeners a remote machine can reach: TCP ones on an
// address that is not loopback (vsock reaches the host alone).
func exposed(ls []net.Listener) []string {
	var out []string
	for _, l := range ls {
		if a, ok := l.Addr().(*net.TCPAddr); ok && !a.IP.IsLoopback() {
			out = append(out, listenAddr(l))
		}
	}
	return out
}

// catchSignals starts handling the signals the agent stops on, and a
// hangup if it was started with hangups ignored. It runs before anything
// starts programs: a signal ignored by the agent stays ignored in every
// program it runs (Ctrl-C in a terminal would do nothing), and one it
// handles is reset to the default at exec. Started in the background
// (`agent &`, nohup, some supervisors) the agent has SIGINT or SIGHUP
// ignored.
func catchSignals() chan os.Signal {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if signal.Ignored(syscall.SIGHUP) {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	}
	return sigs
}

// keepInheritedFDs marks every descriptor above stderr close-on-exec.
// Whoever started the agent may have left it descriptors it never meant
// to pass on (a CI step's capture pipe, a terminal's or a supervisor's),
// and every program the agent runs would inherit them: a command that
// keeps running then holds such a pipe open, and whoever reads its other
// end waits for an end of file that never comes. The agent's own
// descriptors are close-on-exec already (Go opens every one so), and the
// agent keeps the inherited ones: it only stops handing them on. Like
// catchSignals, it runs before anything starts programs.
func keepInheritedFDs() error {
	err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return err
	}
	// Before Linux 5.11: one by one.
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
	return nil
}

// imageMarker is written by the image build (rootfs/build-image.sh): its
// presence says the agent is the agent of a sandbox VM.
const imageMarker = "/etc/rayito-image"

// clockPolicy decides whether the agent sets the wall clock when a host
// sends the time (/v1/resume, /v1/init): that is its job in a sandbox VM,
// whose clock stands still while it is paused, and never elsewhere,
// where it would set the clock of the machine it runs on (a developer's,
// under make run). mode is --set-clock: true, false, or auto (a VM image
// built by this project, known by imageMarker).
func clockPolicy(mode, marker string) (set bool, why string) {
	return imagePolicy("--set-clock", mode, marker)
}

// imagePolicy decides what flag's mode (true, false or auto) means here:
// auto is true in a sandbox VM image built by this project (marker
// exists), false elsewhere; why says which.
func imagePolicy(flag, mode, marker string) (on bool, why string) {
	switch mode {
	case "true":
		return true, flag + "=true"
	case "false":
		return false, flag + "=false"
	}
	if _, err := os.Stat(marker); err == nil {
		return true, "a sandbox VM image (" + marker + " exists)"
	}
	return false, "not a sandbox VM image (no " + marker + "); " + flag + "=true changes that"
}

// errClockNotSet is what setting the clock answers where the agent does
// not set it.
var errClockNotSet = errors.New("the agent does not set the clock on this machine (--set-clock)")

// clockSetter is set, or a refusal where the policy says no.
func clockSetter(allowed bool, set func(time.Time) error) func(time.Time) error {
	if allowed {
		return set
	}
	return func(time.Time) error { return errClockNotSet }
}
