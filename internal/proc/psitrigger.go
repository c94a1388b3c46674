package proc

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// psiTrigger is a kernel PSI trigger on a pressure file: the kernel wakes
// a thread asleep in poll once some tasks were stalled for a span within
// a window, at most once a window. Waiting costs nothing until then. The
// memory guard and the spare's stall gauge each keep one.
type psiTrigger struct {
	fd, stop int
	ended    chan struct{}
}

// errCgroupGone is how a trigger ends when its cgroup is removed.
var errCgroupGone = errors.New("its cgroup is gone")

// startPSITrigger sets a trigger on file ("some" stalled for stall within
// window) and calls fired each time it fires, from a goroutine of its
// own, until fired returns false, close, or an error; ended (if not nil)
// is told that error (nil after close or fired's false).
func startPSITrigger(file string, stall, window time.Duration, fired func() bool, ended func(error)) (*psiTrigger, error) {
	fd, err := unix.Open(file, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	spec := fmt.Sprintf("some %d %d", stall/time.Microsecond, window/time.Microsecond)
	if _, err := unix.Write(fd, append([]byte(spec), 0)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("the trigger %q on %s: %w", spec, file, err)
	}
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	t := &psiTrigger{fd: fd, stop: stop, ended: make(chan struct{})}
	go func() {
		defer close(t.ended)
		err := t.wait(fired)
		if ended != nil {
			ended(err)
		}
	}()
	return t, nil
}

// wait polls until close, an error, or fired's false.
func (t *psiTrigger) wait(fired func() bool) error {
	fds := []unix.PollFd{{Fd: int32(t.fd), Events: unix.POLLPRI}, {Fd: int32(t.stop), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); errors.Is(err, unix.EINTR) {
			continue
		} else if err != nil {
			return err
		}
		switch {
		case fds[1].Revents != 0:
			return nil
		case fds[0].Revents&unix.POLLERR != 0:
			return errCgroupGone
		case fds[0].Revents&unix.POLLPRI != 0 && !fired():
			return nil
		}
	}
}

// close stops the wait and releases the trigger.
func (t *psiTrigger) close() {
	if t == nil {
		return
	}
	unix.Write(t.stop, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	<-t.ended
	unix.Close(t.fd)
	unix.Close(t.stop)
}
