package files

import (
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Descriptors held by transfers are counted: a download keeps its file
// open for as long as its client takes to read it, and the agent's
// connection limit leaves only part of the process's descriptors to
// everything else (processes, pipes, kernels, files). A download whose
// file would go past the budget (heldBudget) waits for one to close, then
// is refused with ErrBusy.

// heldWait is how long an open waits for a descriptor of the budget (a
// variable for tests).
var heldWait = 10 * time.Second

// heldBudget is how many files transfers may hold open at once: an
// eighth of the descriptor limit (the connection limit leaves a quarter
// to everything but connections), at least 64.
func heldBudget() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY {
		return 1024
	}
	return int(max(rl.Cur/8, 64))
}

// holdSlot takes one descriptor of the budget for path's open.
func (m *Manager) holdSlot(path string) error {
	select {
	case m.held <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(heldWait)
	defer t.Stop()
	select {
	case m.held <- struct{}{}:
		return nil
	case <-t.C:
		return newErr("read", path, ErrBusy, fmt.Errorf("%d files are open for transfers, the most at once, for %v", cap(m.held), heldWait))
	}
}

func (m *Manager) releaseSlot() { <-m.held }

// openHeld opens path for reading as u, on the budget; closeHeld closes
// it and gives its descriptor back.
func (m *Manager) openHeld(u User, path string) (*os.File, error) {
	if err := m.holdSlot(path); err != nil {
		return nil, err
	}
	var f *os.File
	err := m.as(u, func() error {
		// Never blocks on a FIFO swapped in for the file: opened without
		// waiting, and refused unless it is a regular file.
		fd, err := m.openFor(u, "read", path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK)
		if err != nil {
			return asFileError("read", path, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return newErr("read", path, nil, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			unix.Close(fd)
			return newErr("read", path, ErrNotRegular, errReplaced)
		}
		unix.SetNonblock(fd, false)
		f = os.NewFile(uintptr(fd), path)
		return nil
	})
	if err != nil {
		m.releaseSlot()
		return nil, err
	}
	return f, nil
}

func (m *Manager) closeHeld(f *os.File) {
	f.Close()
	m.releaseSlot()
}

// heldFile gives a File's descriptor back to the budget once, at Close.
type heldFile struct {
	once sync.Once
	m    *Manager
}

func (h *heldFile) release() {
	if h != nil {
		h.once.Do(h.m.releaseSlot)
	}
}
