package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// sequence checks what a producer in the guest emits: items numbered from
// 0 ("NAME N PID" lines, or files f<N> seen by a watch), each exactly once
// and in order, all from one process, until "done COUNT PID" says how many
// there were. Safe for concurrent use.
type sequence struct {
	name string

	mu       sync.Mutex
	pid      int // expected producer pid; 0 until known
	next     int // the number expected next
	total    int // from the done line; -1 before
	problems []string
	partial  string        // text after the last newline
	changed  chan struct{} // closed and replaced on every change
}

func newSequence(name string, pid int) *sequence {
	return &sequence{name: name, pid: pid, total: -1, changed: make(chan struct{})}
}

// feed takes output text in arbitrary chunks (terminal output included:
// "\r\n" line ends).
func (s *sequence) feed(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	text = s.partial + text
	lines := strings.Split(text, "\n")
	s.partial = lines[len(lines)-1]
	for _, l := range lines[:len(lines)-1] {
		s.lineLocked(strings.TrimRight(l, "\r"))
	}
	s.notifyLocked()
}

func (s *sequence) lineLocked(l string) {
	f := strings.Fields(l)
	if len(f) != 3 {
		s.problemLocked("unexpected line %q", l)
		return
	}
	n, err1 := strconv.Atoi(f[1])
	pid, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		s.problemLocked("unexpected line %q", l)
		return
	}
	switch f[0] {
	case s.name:
		s.gotLocked(n, pid)
	case "done":
		s.checkPidLocked(pid)
		if s.total >= 0 {
			s.problemLocked("second done line %q", l)
		}
		s.total = n
	default:
		s.problemLocked("unexpected line %q", l)
	}
}

// got records item n from process pid (0: no pid to check).
func (s *sequence) got(n, pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gotLocked(n, pid)
	s.notifyLocked()
}

// finish records the total the producer reported.
func (s *sequence) finish(total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total = total
	s.notifyLocked()
}

func (s *sequence) gotLocked(n, pid int) {
	s.checkPidLocked(pid)
	switch {
	case s.total >= 0:
		s.problemLocked("%d after the done line", n)
	case n < s.next:
		s.problemLocked("%d again (duplicate), expected %d", n, s.next)
	case n > s.next:
		s.problemLocked("%d where %d was expected: %d missing", n, s.next, n-s.next)
		s.next = n + 1
	default:
		s.next++
	}
}

func (s *sequence) checkPidLocked(pid int) {
	switch {
	case pid == 0:
	case s.pid == 0:
		s.pid = pid
	case pid != s.pid:
		s.problemLocked("from pid %d, expected %d: the producer restarted", pid, s.pid)
	}
}

// fail records a problem found elsewhere (a read error, an event out of
// order).
func (s *sequence) fail(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.problemLocked(format, args...)
	s.notifyLocked()
}

func (s *sequence) problemLocked(format string, args ...any) {
	const keep = 20
	if len(s.problems) < keep {
		s.problems = append(s.problems, fmt.Sprintf(format, args...))
	}
}

func (s *sequence) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// count is how many items arrived in order so far.
func (s *sequence) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next
}

// waitFor waits until more than n items arrived.
func (s *sequence) waitFor(ctx context.Context, n int) error {
	return s.waitUntil(ctx, func() bool { return s.next > n }, fmt.Sprintf("more than %d items", n))
}

// waitComplete waits until the done line (or finish) and every item it
// counts arrived.
func (s *sequence) waitComplete(ctx context.Context) error {
	return s.waitUntil(ctx, func() bool { return s.total >= 0 && s.next >= s.total }, "the complete sequence")
}

func (s *sequence) waitUntil(ctx context.Context, cond func() bool, what string) error {
	for {
		s.mu.Lock()
		ok, ch, next, total := cond(), s.changed, s.next, s.total
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for %s: have %d in order (done says %d): %w", s.name, what, next, total, ctx.Err())
		}
	}
}

// result describes the sequence and returns its problems (nil if none):
// every item once, in order, and as many as the producer made.
func (s *sequence) result() (string, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	problems := append([]string(nil), s.problems...)
	if s.total < 0 {
		problems = append(problems, "no done line")
	} else if s.next != s.total {
		problems = append(problems, fmt.Sprintf("%d items in order, the producer made %d", s.next, s.total))
	}
	if s.partial != "" {
		problems = append(problems, fmt.Sprintf("unterminated output %q", s.partial))
	}
	return fmt.Sprintf("%s: %d items from pid %d", s.name, s.next, s.pid), problems
}
