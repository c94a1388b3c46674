package proc

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// OOM kills, told apart from other SIGKILLs. A process the OOM killer ends
// dies of SIGKILL like one a user killed; users read such a death as "the
// socket closed". The kernel logs each victim ("Memory cgroup out of
// memory: Killed process 4242 (python3) ..."), so the agent follows its
// log (/dev/kmsg, from the moment it starts) and marks the statuses of the
// victims it reaped (Status.OOMKilled). The log line comes before the
// process dies, but the agent may read it a moment after it reaped the
// process: a SIGKILL death waits up to oomLineWait for it.

// oomLineWait bounds the wait for the kernel's line about a process that
// died of SIGKILL: the OOM killer logs before it kills, so the line is
// there already but for the reading.
const oomLineWait = 200 * time.Millisecond

// oomKept bounds how many victims are remembered, and for how long.
const (
	oomKeptMax = 1024
	oomKeptFor = time.Minute
)

// OOMKills follows the kernel's log for the OOM killer's victims.
type OOMKills struct {
	f *os.File

	mu      sync.Mutex
	victims map[int]time.Time
	changed chan struct{}
	count   int64
}

// WatchOOMKills follows /dev/kmsg from now on; Close stops it. Reading it
// takes CAP_SYSLOG (root): without, an error, and SIGKILL deaths are
// reported as such.
func WatchOOMKills() (*OOMKills, error) {
	f, err := os.OpenFile("/dev/kmsg", os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if _, err := unix.Seek(int(f.Fd()), 0, io.SeekEnd); err != nil {
		f.Close()
		return nil, err
	}
	o := newOOMKills()
	o.f = f
	go o.follow()
	return o, nil
}

func newOOMKills() *OOMKills {
	return &OOMKills{victims: map[int]time.Time{}, changed: make(chan struct{})}
}

// follow reads one log record per read until Close.
func (o *OOMKills) follow() {
	buf := make([]byte, 8192)
	for {
		n, err := o.f.Read(buf)
		if n > 0 {
			o.note(buf[:n])
		}
		if errors.Is(err, syscall.EPIPE) {
			continue // records were overwritten before they were read
		}
		if err != nil && n == 0 {
			return
		}
	}
}

// note records the victim a log record names, if it names one.
func (o *OOMKills) note(record []byte) {
	_, msg, ok := bytes.Cut(record, []byte(";"))
	if !ok {
		return
	}
	_, rest, ok := bytes.Cut(msg, []byte("Killed process "))
	if !ok {
		return
	}
	end := bytes.IndexByte(rest, ' ')
	if end < 0 {
		end = len(rest)
	}
	pid, err := strconv.Atoi(string(rest[:end]))
	if err != nil {
		return
	}
	o.noteKill(pid)
}

// noteKill records pid as an OOM victim.
func (o *OOMKills) noteKill(pid int) {
	if o == nil {
		return
	}
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.count++
	if len(o.victims) >= oomKeptMax {
		// Victims nobody asked about (not the agent's children).
		for p, at := range o.victims {
			if now.Sub(at) > oomKeptFor {
				delete(o.victims, p)
			}
		}
		if len(o.victims) >= oomKeptMax {
			clear(o.victims)
		}
	}
	o.victims[pid] = now
	close(o.changed)
	o.changed = make(chan struct{})
}

// Killed reports whether the OOM killer killed pid, waiting up to wait
// for the line that would say so.
func (o *OOMKills) Killed(pid int, wait time.Duration) bool {
	if o == nil {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		o.mu.Lock()
		_, killed := o.victims[pid]
		if killed {
			delete(o.victims, pid)
		}
		ch := o.changed
		o.mu.Unlock()
		if killed {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		}
	}
}

// Count is how many OOM kills the log named since the agent started.
func (o *OOMKills) Count() int64 {
	if o == nil {
		return 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.count
}

// Close stops following the log.
func (o *OOMKills) Close() {
	if o != nil && o.f != nil {
		o.f.Close()
	}
}
