package stream

import (
	"encoding/json"
	"sync"
	"time"
)

// Kind names what a stream is; it appears in `list` and `attach` results.
type Kind string

const (
	KindProcess  Kind = "process"
	KindPTY      Kind = "pty"
	KindWatch    Kind = "watch"
	KindCell     Kind = "cell"
	KindChannels Kind = "kernel_channels"
)

// DefaultGrace is how long a Block stream keeps blocking after its last
// client went away: long enough to reconnect after a VM resume.
const DefaultGrace = 30 * time.Second

// ChannelSpec describes one channel of a new stream.
type ChannelSpec struct {
	Name     string
	Unit     Unit
	Policy   Policy
	Capacity int // bytes or events; 0 picks the default for the unit
}

// Config describes a new stream.
type Config struct {
	Kind     Kind
	Channels []ChannelSpec
	Grace    time.Duration // for Block channels; negative means none
	Pid      int
	Tag      string
	Argv     []string
	// Control is the producer's handle for ops on the stream (signal,
	// input, resize...); the endpoint asserts the interfaces it needs.
	Control any
	// Reservation is retention budget set aside for the stream with
	// Registry.Reserve (for a `buffer` a client asked for); Create uses it
	// up.
	Reservation *Reservation
}

// Stream is one long-lived producer with its channel logs.
type Stream struct {
	ID      uint64
	Kind    Kind
	Pid     int
	Tag     string
	Argv    []string
	Control any
	Created time.Time

	reg    *Registry
	budget *Budget

	mu         sync.Mutex
	logs       []*Log
	changed    chan struct{}
	grace      time.Duration
	attached   int
	atts       []*Attachment // open attachments
	lastDetach time.Time
	end        *End
	endedAt    time.Time
	done       chan struct{}
	held       int64 // memory the logs hold, charged to the budget
	reserve    int64 // budget set aside while the stream runs
	trimmed    bool  // read to the end: only a tail is kept
	freed      bool  // the buffers were let go for good
}

func newStream(id uint64, cfg Config, now time.Time, reg *Registry, reserve int64) *Stream {
	s := &Stream{
		ID: id, Kind: cfg.Kind, Pid: cfg.Pid, Tag: cfg.Tag, Argv: cfg.Argv,
		Control: cfg.Control, Created: now, reg: reg, budget: reg.budget, reserve: reserve,
		changed: make(chan struct{}), grace: cfg.Grace,
		lastDetach: now, done: make(chan struct{}),
	}
	if s.grace == 0 {
		s.grace = DefaultGrace
	}
	for _, c := range cfg.Channels {
		l := &Log{s: s, name: c.Name, unit: c.Unit, policy: c.Policy, capacity: c.Capacity}
		if l.capacity <= 0 {
			l.capacity = DefaultByteCapacity
			if c.Unit == Events {
				l.capacity = DefaultEventCapacity
			}
		}
		if c.Unit == Events {
			l.maxBytes = DefaultEventBytes
		}
		s.logs = append(s.logs, l)
	}
	return s
}

// Log returns the channel with the given name, or nil.
func (s *Stream) Log(name string) *Log {
	for _, l := range s.logs {
		if l.name == name {
			return l
		}
	}
	return nil
}

// Logs returns the stream's channels in their fixed order.
func (s *Stream) Logs() []*Log { return s.logs }

// Done is closed when the stream has ended.
func (s *Stream) Done() <-chan struct{} { return s.done }

// Finish closes every log and records how the stream ended. Producers call
// it after their last write; later writes fail with ErrClosed. Only the
// first call counts. What the stream set aside of the budget goes back;
// what it retains stays, for clients to read, until every client has
// acknowledged it or the registry lets the stream expire.
func (s *Stream) Finish(e End) {
	s.mu.Lock()
	if s.end != nil {
		s.mu.Unlock()
		return
	}
	for _, l := range s.logs {
		l.closed = true
	}
	charged := s.chargeLocked()
	s.end = &e
	s.endedAt = time.Now()
	s.budget.give(charged - s.chargeLocked())
	s.budget.addEnded(s.held)
	close(s.done)
	s.releaseReadLocked()
	// The end, like an append, goes to a parked consumer's hook: a short
	// command's end event then needs no wake-up either (handoff.go).
	var buf [4]func()
	hooks := s.hooksLocked(buf[:0])
	s.mu.Unlock()
	s.reg.noteEnded(s)
	for _, h := range hooks {
		h()
	}
}

// chargeLocked is what the stream counts against the budget.
func (s *Stream) chargeLocked() int64 {
	if s.end == nil {
		return max(s.held, s.reserve)
	}
	return s.held
}

// growLocked charges n more bytes of memory to the stream. When the
// budget has no room it changes nothing and returns a channel that is
// closed once memory is given back.
func (s *Stream) growLocked(n int64) (bool, <-chan struct{}) {
	before := s.chargeLocked()
	s.held += n
	if d := s.chargeLocked() - before; d > 0 {
		if ok, wait := s.budget.takeOrWait(d, s.held <= streamFloor); !ok {
			s.held -= n
			return false, wait
		}
	}
	if s.end != nil {
		s.budget.addEnded(n)
	}
	return true, nil
}

// shortLocked says the budget has no room for least more bytes of this
// stream, in the share growLocked would take them from.
func (s *Stream) shortLocked(least int64) shortBy {
	return shortBy{least: least, floor: s.held+least <= streamFloor}
}

// shrinkLocked records that the logs let n bytes of memory go.
func (s *Stream) shrinkLocked(n int64) {
	before := s.chargeLocked()
	s.held -= n
	if s.end != nil {
		s.budget.addEnded(-n)
	}
	s.budget.give(before - s.chargeLocked())
}

// ReadTail is what an ended stream keeps of each channel once clients have
// read it all: enough for a client that attaches later (by tag, say) to
// see how a command ended, while a big output lets its memory go at once.
const ReadTail = 64 << 10

// releaseReadLocked lets go of what nobody needs any more: in each byte
// channel of a running stream, what every attached client acknowledged
// (with none attached, what any client did) but its last ReadTail bytes,
// a whole chunk at a time; and once the stream has ended and its clients
// acknowledged all of it, all but ReadTail of each channel. A client that
// attaches later (by tag, say) still sees how the output ended. A client that reattaches by its cursor needs nothing below it,
// and the memory is better given back at once than when the stream
// expires: in a sandbox every byte the agent keeps is in every snapshot.
func (s *Stream) releaseReadLocked() {
	if s.freed || s.trimmed {
		return
	}
	read := true
	for i, l := range s.logs {
		upto := l.acked
		for _, a := range s.atts {
			upto = min(upto, a.acked[i])
		}
		if upto < l.end {
			read = false
		}
		if keep := l.end - min(l.end, ReadTail); s.end == nil && l.unit == Bytes && min(upto, keep) > l.start {
			l.discard(int(min(upto, keep) - l.start))
		}
	}
	if s.end != nil && read {
		s.trimmed = true
		for _, l := range s.logs {
			l.keepTail(ReadTail)
		}
	}
}

// freeLocked lets every buffer of the stream go for good.
func (s *Stream) freeLocked() {
	if s.freed {
		return
	}
	s.freed = true
	for _, l := range s.logs {
		l.free()
	}
}

// trimAckedLocked lets go of what clients acknowledged, for a budget
// that others are waiting on.
func (s *Stream) trimAckedLocked() {
	for _, l := range s.logs {
		l.trimAcked()
	}
}

// Ended returns the end record, or nil while the stream runs.
func (s *Stream) Ended() *End {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end
}

// Cursors returns every channel's end position: what a client has when it
// has consumed all that was written so far.
func (s *Stream) Cursors() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cursorsLocked(nil)
}

func (s *Stream) cursorsLocked(pos []uint64) map[string]uint64 {
	c := make(map[string]uint64, len(s.logs))
	for i, l := range s.logs {
		if pos != nil {
			c[l.name] = pos[i]
		} else {
			c[l.name] = l.end
		}
	}
	return c
}

// notifyLocked wakes everyone waiting on the stream.
func (s *Stream) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
	s.kickParkedLocked()
}

// inGraceLocked reports whether Block logs must still hold unacknowledged
// data: a client is attached, or the last one left less than grace ago.
func (s *Stream) inGraceLocked() bool {
	return s.attached > 0 || (s.grace > 0 && time.Since(s.lastDetach) < s.grace)
}

// waiter is a blocked writer's wait: until the stream changes, until the
// budget gets memory back (when that is what it waits for), or until the
// grace period runs out (which changes what a write may discard).
type waiter struct {
	ch       <-chan struct{}
	budget   <-chan struct{}
	deadline time.Time
}

func (s *Stream) waiterLocked(budget <-chan struct{}) *waiter {
	w := &waiter{ch: s.changed, budget: budget}
	if s.attached == 0 && s.grace > 0 {
		w.deadline = s.lastDetach.Add(s.grace)
	}
	return w
}

func (w *waiter) do() {
	var timeout <-chan time.Time
	if !w.deadline.IsZero() {
		t := time.NewTimer(time.Until(w.deadline))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-w.ch:
	case <-w.budget:
	case <-timeout:
	}
}

// Reason is why a stream, or one attachment to it, ended.
type Reason string

const (
	ReasonExit   Reason = "exit"
	ReasonDone   Reason = "done"
	ReasonClosed Reason = "closed"
	ReasonResume Reason = "resume"
	ReasonError  Reason = "error"
	// ReasonOOMKilled: the kernel's OOM killer ended the process (the
	// user cgroup's memory.max, or the machine's memory); signal SIGKILL.
	ReasonOOMKilled Reason = "oom_killed"
)

// Reasons are every end reason of the protocol.
var Reasons = []Reason{ReasonExit, ReasonDone, ReasonClosed, ReasonResume, ReasonError, ReasonOOMKilled}

// End records how a stream ended. Which fields are encoded depends on the
// reason, as the protocol's `end` event says.
type End struct {
	Reason         Reason
	ExitCode       *int   // exit
	Signal         string // exit: signal name, "" for none
	Status         string // done: ok, error, aborted
	ExecutionCount *int   // done
	Message        string // error, and optional detail for others
	// Extra holds fields of a producer's own (a file's size and hash);
	// they never replace the fields above.
	Extra map[string]any
}

// Fields returns the end's reason-specific fields for JSON encoding.
func (e End) Fields() map[string]any {
	m := map[string]any{"reason": e.Reason}
	switch e.Reason {
	case ReasonExit, ReasonOOMKilled:
		m["exit_code"] = e.ExitCode
		if e.Signal != "" {
			m["signal"] = e.Signal
		} else {
			m["signal"] = nil
		}
	case ReasonDone:
		m["status"] = e.Status
		m["execution_count"] = e.ExecutionCount
	}
	if e.Message != "" {
		m["message"] = e.Message
	}
	for k, v := range e.Extra {
		if _, taken := m[k]; !taken {
			m[k] = v
		}
	}
	return m
}

// MarshalJSON encodes the end as its reason-specific fields.
func (e End) MarshalJSON() ([]byte, error) { return json.Marshal(e.Fields()) }
