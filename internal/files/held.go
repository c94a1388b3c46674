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

// heldSlots counts the descriptors transfers hold, in all and by client
// (the address a request came from: surface.ClientOf). No client holds
// more than half of them: one client with thousands of stalled downloads
// leaves the other half to everybody else, where it used to make every
// download on every surface wait and fail.
type heldSlots struct {
	max, share int

	mu    sync.Mutex
	used  int
	by    map[string]int
	freed chan struct{} // closed and replaced when a slot is given back
}

func newHeldSlots(n int) *heldSlots {
	return &heldSlots{max: n, share: max(n/2, 1), by: map[string]int{}, freed: make(chan struct{})}
}

// take claims a slot for client, waiting up to wait for one; the error
// says which bound was met.
func (h *heldSlots) take(client string, wait time.Duration) error {
	var t *time.Timer
	for {
		h.mu.Lock()
		if h.used < h.max && h.by[client] < h.share {
			h.used++
			h.by[client]++
			h.mu.Unlock()
			return nil
		}
		own, freed := h.by[client], h.freed
		h.mu.Unlock()
		if t == nil {
			t = time.NewTimer(wait)
			defer t.Stop()
		}
		select {
		case <-freed:
		case <-t.C:
			if own >= h.share {
				return fmt.Errorf("this client (%s) holds %d files open for transfers, its share of the %d the agent holds at once, for %v", clientName(client), own, h.max, wait)
			}
			return fmt.Errorf("%d files are open for transfers, the most at once, for %v", h.max, wait)
		}
	}
}

// give returns client's slot.
func (h *heldSlots) give(client string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.used--
	if h.by[client]--; h.by[client] <= 0 {
		delete(h.by, client)
	}
	close(h.freed)
	h.freed = make(chan struct{})
}

func clientName(c string) string {
	if c == "" {
		return "unknown address"
	}
	return c
}

// holdSlot takes one descriptor of the budget for client's open of path.
func (m *Manager) holdSlot(client, path string) error {
	if err := m.held.take(client, heldWait); err != nil {
		return newErr("read", path, ErrBusy, err)
	}
	return nil
}

func (m *Manager) releaseSlot(client string) { m.held.give(client) }

// openHeld opens path for reading as u, on client's budget; closeHeld
// closes it and gives its descriptor back.
func (m *Manager) openHeld(client string, u User, path string) (*os.File, error) {
	if err := m.holdSlot(client, path); err != nil {
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
		m.releaseSlot(client)
		return nil, err
	}
	return f, nil
}

func (m *Manager) closeHeld(client string, f *os.File) {
	f.Close()
	m.releaseSlot(client)
}

// heldFile gives a File's descriptor back to its client's budget once,
// at Close.
type heldFile struct {
	once   sync.Once
	m      *Manager
	client string
}

func (h *heldFile) release() {
	if h != nil {
		h.once.Do(func() { h.m.releaseSlot(h.client) })
	}
}
