package ptymux

import (
	"fmt"
	"os"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// openPair opens a new pseudo-terminal and returns its master, pollable by
// the runtime, and its slave, for the child.
func openPair() (master, slave *os.File, err error) {
	m, s, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open pty: %w", err)
	}
	if master, err = pollable(m); err != nil {
		s.Close()
		return nil, nil, err
	}
	return master, s, nil
}

// pollable replaces f by a non-blocking duplicate that the runtime poller
// manages. pty.Open returns a master already in blocking mode (its ioctls
// call Fd), whose reads ignore deadlines and outlive Close.
func pollable(f *os.File) (*os.File, error) {
	defer f.Close()
	var nfd int
	err := control(f, func(fd int) (err error) {
		if nfd, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0); err != nil {
			return err
		}
		if err = unix.SetNonblock(nfd, true); err != nil {
			unix.Close(nfd)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pty master: %w", err)
	}
	p := os.NewFile(uintptr(nfd), f.Name())
	// A file the poller refused would block forever in Read; better to fail.
	if err := p.SetReadDeadline(time.Time{}); err != nil {
		p.Close()
		return nil, fmt.Errorf("pty master is not pollable: %w", err)
	}
	return p, nil
}

// control runs fn on f's descriptor without switching f to blocking mode
// (which Fd would do) and while keeping f from being closed under it.
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// setSize sets the terminal's window size; the kernel sends SIGWINCH to the
// foreground process group when it changes.
func setSize(master *os.File, cols, rows uint16) error {
	return control(master, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Col: cols, Row: rows})
	})
}

// foreground returns the terminal's foreground process group: the job the
// user is looking at, which is what Ctrl-C would interrupt.
func foreground(master *os.File) (int, error) {
	var pgrp int
	err := control(master, func(fd int) (err error) {
		pgrp, err = unix.IoctlGetInt(fd, unix.TIOCGPGRP)
		return err
	})
	return pgrp, err
}
