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
// there were. It counts what was lost or duplicated, in items and in
// bytes (lines) or wire events (seqs). Safe for concurrent use.
type sequence struct {
	name string

	mu       sync.Mutex
	pid      int // expected producer pid; 0 until known
	next     int // the number expected next
	total    int // from the done line; -1 before
	crs      int // lines that ended in "\r\n" (terminal output), not "\n"
	tally    tally
	lastSeq  uint64 // the last wire event seq (seqEvent)
	problems []string
	partial  string        // text after the last newline
	changed  chan struct{} // closed and replaced on every change
}

// tally is what a sequence counted: items in order, items lost (a number
// skipped) or duplicated (a number again), and the same in bytes for line
// producers (received counts every byte fed, stray the bytes of lines
// that are no item at all) or in wire events for event streams.
type tally struct {
	items, lost, dup                     int
	received, lostBytes, dupBytes, stray int
	events, lostEvents, dupEvents        uint64
}

func newSequence(name string, pid int) *sequence {
	return &sequence{name: name, pid: pid, total: -1, changed: make(chan struct{})}
}

// feed takes output text in arbitrary chunks (terminal output included:
// "\r\n" line ends).
func (s *sequence) feed(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tally.received += len(text)
	text = s.partial + text
	lines := strings.Split(text, "\n")
	s.partial = lines[len(lines)-1]
	for _, l := range lines[:len(lines)-1] {
		body := strings.TrimRight(l, "\r")
		size := len(l) + 1 // with its line end
		if len(body) < len(l) {
			s.crs++
		}
		s.lineLocked(body, size)
	}
	s.notifyLocked()
}

// lineLocked takes one line without its end; size counts the end too.
func (s *sequence) lineLocked(l string, size int) {
	f := strings.Fields(l)
	if len(f) != 3 {
		s.strayLocked(l, size)
		return
	}
	n, err1 := strconv.Atoi(f[1])
	pid, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		s.strayLocked(l, size)
		return
	}
	switch f[0] {
	case s.name:
		s.gotLocked(n, pid, size)
	case "done":
		s.checkPidLocked(pid)
		if s.total >= 0 {
			s.problemLocked("second done line %q", l)
		}
		s.total = n
	default:
		s.strayLocked(l, size)
	}
}

func (s *sequence) strayLocked(l string, size int) {
	s.tally.stray += size
	s.problemLocked("unexpected line %q", l)
}

// got records item n from process pid (0: no pid to check), for items
// that are no lines (files a watch reports).
func (s *sequence) got(n, pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gotLocked(n, pid, 0)
	s.notifyLocked()
}

// seqEvent checks the wire seq of the next event of an event stream:
// they go 1, 2, 3... without holes or repeats.
func (s *sequence) seqEvent(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case seq == s.lastSeq+1:
		s.tally.events++
	case seq <= s.lastSeq:
		s.tally.dupEvents++
		s.problemLocked("event seq %d after %d (duplicate)", seq, s.lastSeq)
	default:
		s.tally.events++
		s.tally.lostEvents += seq - s.lastSeq - 1
		s.problemLocked("event seq %d after %d: %d missing", seq, s.lastSeq, seq-s.lastSeq-1)
	}
	s.lastSeq = max(s.lastSeq, seq)
	s.notifyLocked()
}

// finish records the total the producer reported.
func (s *sequence) finish(total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total = total
	s.notifyLocked()
}

// gotLocked records item n; size is its line's length (0: not a line).
func (s *sequence) gotLocked(n, pid, size int) {
	s.checkPidLocked(pid)
	switch {
	case s.total >= 0:
		s.tally.stray += size
		s.problemLocked("%d after the done line", n)
	case n < s.next:
		s.tally.dup++
		s.tally.dupBytes += size
		s.problemLocked("%d again (duplicate), expected %d", n, s.next)
	case n > s.next:
		s.problemLocked("%d where %d was expected: %d missing", n, s.next, n-s.next)
		s.tally.lost += n - s.next
		if size > 0 {
			// The missing lines differ from this one only in their number.
			for k := s.next; k < n; k++ {
				s.tally.lostBytes += size - digits(n) + digits(k)
			}
		}
		s.tally.items++
		s.next = n + 1
	default:
		s.tally.items++
		s.next++
	}
}

func digits(n int) int { return len(strconv.Itoa(n)) }

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

// counts returns the tally so far.
func (s *sequence) counts() tally {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tally
}

// result describes the sequence and returns its problems (nil if none):
// every item once, in order, and as many as the producer made; for line
// producers also exactly the bytes it wrote.
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
	t := s.tally
	desc := fmt.Sprintf("%d items from pid %d, %d lost, %d duplicated", t.items, s.pid, t.lost, t.dup)
	if t.received > 0 {
		desc += fmt.Sprintf("; %d bytes, %d lost, %d duplicated, %d stray", t.received, t.lostBytes, t.dupBytes, t.stray)
		if want := s.wantBytesLocked(); s.total >= 0 && t.received != want {
			problems = append(problems, fmt.Sprintf("%d bytes received, the producer wrote %d", t.received, want))
		}
	}
	if t.events+t.lostEvents+t.dupEvents > 0 {
		desc += fmt.Sprintf("; %d events, %d lost, %d duplicated", t.events, t.lostEvents, t.dupEvents)
	}
	return desc, problems
}

// wantBytesLocked is how many bytes a line producer wrote: its items
// 0..total-1 and the done line, each "WORD N PID" and a line end (of
// one byte, or two where a terminal made it "\r\n").
func (s *sequence) wantBytesLocked() int {
	line := func(word string, n int) int { return len(word) + 1 + digits(n) + 1 + digits(s.pid) + 1 }
	want := s.crs + line("done", s.total)
	for k := 0; k < s.total; k++ {
		want += line(s.name, k)
	}
	return want
}
