// Package handover carries an agent's state across execve, from the agent
// that lets go to the binary that takes over in the same process (same
// PID, so user processes stay its children).
//
// The agent that lets go puts each participant's state in a section and
// each descriptor it carries under a name; Exec writes them to a memfd
// (memory, never the disk), clears close-on-exec on the memfd and the
// carried descriptors, and execs the new binary with the memfd's number in
// RAYITO_HANDOVER_FD. The new agent's Take reads them back and closes what
// nobody adopted. A format version travels with the state: an agent reads
// its own format and the one before it (Reads), so a rollback works across
// one release, and the agent letting go writes the newest format the new
// binary says it reads (handover-check).
package handover

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// Format is the handover state's version this agent writes.
const Format = 1

// Reads are the formats this agent reads: its own and the one before it.
var Reads = []int{Format}

// The environment a handover's exec passes: the state's descriptor,
// the previous binary's (to hand back to), and, in a hand-back, why.
const (
	EnvFD       = "RAYITO_HANDOVER_FD"
	EnvPrevious = "RAYITO_HANDOVER_PREVIOUS"
	EnvFailed   = "RAYITO_HANDOVER_FAILED"
)

// maxState bounds the state read back: retained output is carried in it.
const maxState = 1 << 30

// Errors callers branch on.
var (
	// ErrNone: the agent was not started by a handover.
	ErrNone = errors.New("no handover state")
	// ErrFormat: the state is in a format this agent does not read.
	ErrFormat = errors.New("handover state in a format this agent does not read")
)

// envelope is the state as written.
type envelope struct {
	Format      int                        `json:"format"`
	FromVersion string                     `json:"from_version"`
	Sections    map[string]json.RawMessage `json:"sections"`
	// FDs are the carried descriptors' numbers, by name.
	FDs map[string]int `json:"fds"`
}

// State is a handover being written (Put, PutFile) or read (Get, Dup).
type State struct {
	env envelope
	// Being written: the files to carry, held so that no finalizer closes
	// one before the exec; Close lets go of them when it failed.
	files map[string]*os.File
	// Being read: the state's own descriptor and the previous binary's
	// (-1: none), kept open with the carried ones until Commit, so that
	// HandBack can pass them all on.
	stateFD, previousFD int
	failed              string
	committed           bool
}

// New returns an empty state for an agent of version from.
func New(from string) *State {
	return &State{env: envelope{Format: Format, FromVersion: from, Sections: map[string]json.RawMessage{}, FDs: map[string]int{}},
		files: map[string]*os.File{}, stateFD: -1, previousFD: -1}
}

// FromVersion is the version of the agent that wrote the state.
func (s *State) FromVersion() string { return s.env.FromVersion }

// Format is the state's format.
func (s *State) Format() int { return s.env.Format }

// Put stores v (JSON) as the section name, replacing any before.
func (s *State) Put(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("handover section %s: %w", name, err)
	}
	s.env.Sections[name] = b
	return nil
}

// Get reads the section name into v; false if the state has none.
func (s *State) Get(name string, v any) (bool, error) {
	b, ok := s.env.Sections[name]
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return true, fmt.Errorf("handover section %s: %w", name, err)
	}
	return true, nil
}

// PutFile carries f's descriptor under name. f stays the caller's: it
// must stay open until Exec.
func (s *State) PutFile(name string, f *os.File) {
	s.files[name] = f
	s.env.FDs[name] = int(f.Fd())
}

// Dup is a duplicate of the descriptor carried under name, which the
// caller owns (nil if none is carried): close-on-exec, so processes
// started later do not inherit it. The carried one stays open for a
// hand-back until Commit.
func (s *State) Dup(name string) (*os.File, error) {
	fd, ok := s.env.FDs[name]
	if !ok || s.committed {
		return nil, nil
	}
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("handover descriptor %s (%d): %w", name, fd, err)
	}
	return os.NewFile(uintptr(nfd), name), nil
}

// Close closes the files given to PutFile, once a handover that was to
// carry them did not happen (they are duplicates: the originals serve on).
func (s *State) Close() {
	for _, f := range s.files {
		f.Close()
	}
}

// Files lists the names of the carried descriptors.
func (s *State) Files() []string {
	var names []string
	for n := range s.env.FDs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Failed is why the agent this one handed over to handed back ("" if it
// did not: this is the new agent).
func (s *State) Failed() string { return s.failed }

// Commit closes what the handover carried (the state, the previous
// binary, every carried descriptor; the adopters hold duplicates): the
// new agent serves, and can no longer hand back.
func (s *State) Commit() {
	if s.committed {
		return
	}
	s.committed = true
	for _, fd := range s.env.FDs {
		unix.Close(fd)
	}
	for _, fd := range []int{s.stateFD, s.previousFD} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// Take reads the state this process was started with, if any (ErrNone if
// not), and removes the handover's variables from the environment. A
// format it does not read is ErrFormat: the caller hands back.
func Take() (*State, error) {
	v, ok := os.LookupEnv(EnvFD)
	if !ok {
		return nil, ErrNone
	}
	prev, failed := envFD(EnvPrevious), os.Getenv(EnvFailed)
	for _, name := range []string{EnvFD, EnvPrevious, EnvFailed} {
		os.Unsetenv(name)
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 0 {
		return nil, fmt.Errorf("%s=%q is not a descriptor", EnvFD, v)
	}
	s, err := read(fd)
	if s == nil {
		s = &State{env: envelope{FDs: map[string]int{}}}
	}
	s.stateFD, s.previousFD, s.failed = fd, prev, failed
	if err != nil {
		// Kept, with the descriptors, for the hand-back.
		return s, err
	}
	return s, nil
}

func envFD(name string) int {
	fd, err := strconv.Atoi(os.Getenv(name))
	if err != nil || fd < 0 {
		return -1
	}
	return fd
}

func read(fd int) (*State, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("handover state: %w", err)
	}
	if st.Size > maxState {
		return nil, fmt.Errorf("handover state of %d bytes, more than %d", st.Size, maxState)
	}
	b := make([]byte, st.Size)
	for off := 0; off < len(b); {
		n, err := unix.Pread(fd, b[off:], int64(off))
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return nil, fmt.Errorf("reading the handover state at %d of %d bytes: %v", off, len(b), err)
		}
		off += n
	}
	return decode(b)
}

func decode(b []byte) (*State, error) {
	var e envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("handover state: %w", err)
	}
	if !slices.Contains(Reads, e.Format) {
		return nil, fmt.Errorf("%w: format %d from %s, this agent reads %v", ErrFormat, e.Format, e.FromVersion, Reads)
	}
	if e.Sections == nil {
		e.Sections = map[string]json.RawMessage{}
	}
	if e.FDs == nil {
		e.FDs = map[string]int{}
	}
	return &State{env: e, files: map[string]*os.File{}, stateFD: -1, previousFD: -1}, nil
}
