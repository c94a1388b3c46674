package proc

import (
	"errors"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// KillGrace is how long a timed-out or shut-down process group has between
// SIGTERM and SIGKILL, from the protocol.
const KillGrace = 2 * time.Second

// Manager starts commands and turns them into streams.
type Manager struct {
	reg      *stream.Registry
	reaper   *Reaper
	defaults *Defaults
	log      *zap.Logger

	// drainIdle and drainMax are the drain bounds (tests shorten them).
	drainIdle, drainMax time.Duration

	mu      sync.Mutex
	running map[int]*process
	closed  bool
	closing chan struct{}  // closed with closed: drains stop waiting
	wg      sync.WaitGroup // every process's run and terminate goroutines
}

// NewManager returns a manager that spawns through reaper.
func NewManager(reg *stream.Registry, reaper *Reaper, defaults *Defaults, log *zap.Logger) *Manager {
	if log == nil {
		log = zap.NewNop()
	}
	return &Manager{reg: reg, reaper: reaper, defaults: defaults, log: log, running: make(map[int]*process),
		closing: make(chan struct{}), drainIdle: drainIdle, drainMax: drainMax}
}

// ExecOptions is an `exec` request after decoding.
type ExecOptions struct {
	Spec
	Stdin    bool
	Tag      string
	Timeout  time.Duration
	Buffer   int
	Overflow stream.Policy
	Grace    time.Duration
}

// Exec starts a command in its own session with stdout and stderr going
// into a new stream.
func (m *Manager) Exec(o ExecOptions) (*stream.Stream, error) {
	if o.Buffer < 0 || o.Buffer > stream.MaxByteCapacity {
		return nil, wire.Errorf(wire.CodeBadRequest, "buffer must be between 0 and %d bytes", stream.MaxByteCapacity)
	}
	res, err := m.defaults.Resolve(o.Spec)
	if err != nil {
		return nil, err
	}
	var reserved *stream.Reservation
	if o.Buffer > 0 {
		if reserved, err = m.reg.Reserve(int64(o.Buffer)); err != nil {
			return nil, wire.Errorf(wire.CodeLimit, "buffer of %d bytes: %v", o.Buffer, err)
		}
		defer reserved.Release() // unless the stream was created with it
	}
	p, err := m.spawn(res, o, reserved)
	if err != nil {
		return nil, err
	}
	return p.s, nil
}

func (m *Manager) spawn(res Resolved, o ExecOptions, reserved *stream.Reservation) (*process, error) {
	// The slot in wg is taken under the lock Close sets closed under, so
	// Close either refuses this spawn or waits for its process.
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, wire.Errorf(wire.CodeUnavailable, "agent is shutting down")
	}
	m.wg.Add(1)
	m.mu.Unlock()
	pp, err := openPipes(o.Stdin)
	if err != nil {
		m.wg.Done()
		return nil, wire.Errorf(wire.CodeLimit, "cannot create pipes: %v", err)
	}
	pid, status, err := m.reaper.ForkExec(res.Path, res.Argv, res.Attr(pp.childFiles()))
	pp.closeChildEnds()
	if err != nil {
		pp.closeParentEnds()
		m.wg.Done()
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOMEM) {
			// The sandbox is out of processes or memory, not the request
			// at fault: the same request succeeds once there is room.
			return nil, wire.Errorf(wire.CodeLimit, "cannot start %s: %v", res.Argv[0], err)
		}
		return nil, wire.Errorf(wire.CodeBadRequest, "cannot start %s: %v", res.Argv[0], err)
	}
	p := &process{m: m, pid: pid, exited: make(chan struct{})}
	if o.Stdin {
		w := pp.stdinW
		p.input, p.stdin = stream.NewInput(w, w.Close, 0), w
		p.input.ChargeTo(m.reg.Budget())
		// Bulk input (a file piped through) is handed over in fewer,
		// larger writes once the pipe is as large as the input queue.
		p.input.OnBusy(func() {
			if rc, err := w.SyscallConn(); err == nil {
				rc.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize) })
			}
		})
	}
	p.s = m.reg.Create(stream.Config{
		Kind: stream.KindProcess,
		Channels: []stream.ChannelSpec{
			{Name: "stdout", Unit: stream.Bytes, Policy: o.Overflow, Capacity: o.Buffer},
			{Name: "stderr", Unit: stream.Bytes, Policy: o.Overflow, Capacity: o.Buffer},
		},
		Grace: o.Grace, Pid: pid, Tag: o.Tag, Argv: res.Argv, Control: p, Reservation: reserved,
	})
	m.mu.Lock()
	m.running[pid] = p
	closing := m.closed // Close has started and did not see p
	m.mu.Unlock()
	if closing {
		m.goTerminate(p)
	}
	go p.run(status, []*os.File{pp.stdoutR, pp.stderrR}, o.Timeout)
	m.log.Debug("exec", zap.Uint64("stream", p.s.ID), zap.Int("pid", pid), zap.Strings("argv", res.Argv))
	return p, nil
}

// Close kills every running process group (TERM, then KILL after
// KillGrace) and waits until their streams have ended.
func (m *Manager) Close() {
	m.mu.Lock()
	if !m.closed {
		m.closed = true
		close(m.closing)
	}
	m.wg.Add(1) // held while terminations start, so wg never drops to 0 between their Adds
	procs := make([]*process, 0, len(m.running))
	for _, p := range m.running {
		procs = append(procs, p)
	}
	m.mu.Unlock()
	for _, p := range procs {
		m.goTerminate(p)
	}
	m.wg.Done()
	m.wg.Wait()
}

// goTerminate terminates p on its own goroutine, which Close waits for:
// the SIGKILL comes KillGrace after the SIGTERM, possibly after p's stream
// ended. Callers hold a slot in wg (p's run, a spawn, or Close).
func (m *Manager) goTerminate(p *process) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		p.terminate()
	}()
}

func (m *Manager) forget(p *process) {
	m.mu.Lock()
	// The pid may already be another process's: one whose group died
	// while this stream was draining.
	if m.running[p.pid] == p {
		delete(m.running, p.pid)
	}
	m.mu.Unlock()
	m.wg.Done()
}

// pipes are the stdio of a new process: the agent's ends as files in the
// poller, the child's as bare descriptors. Making them with pipe2 rather
// than os.Pipe spares every exec the poller registration, the switch back
// to blocking mode and the deregistration of the child's three ends.
type pipes struct {
	stdinW           *os.File // nil without stdin: the child gets /dev/null
	stdoutR, stderrR *os.File
	child            [3]int // the child's stdin, stdout, stderr
	own              []int  // those of child that are ours to close
}

// pipeSize is what an output pipe is raised to from the kernel's 64 KiB
// once its reader finds it filling up, so a fast producer makes fewer,
// larger writes; a short command never pays for it. Failure to raise it
// is harmless.
const pipeSize = 1 << 20

// growAfter is the read that shows a pipe filling up: a quarter of the
// kernel's default pipe.
const growAfter = 16 << 10

// devNull is the agent's /dev/null, opened once: a child without stdin
// gets it.
var devNull = sync.OnceValues(func() (int, error) {
	return unix.Open(os.DevNull, unix.O_RDWR|unix.O_CLOEXEC, 0)
})

func openPipes(stdin bool) (*pipes, error) {
	pp := &pipes{}
	if stdin {
		theirs, ours, err := pipe2("stdin", false)
		if err != nil {
			return nil, err
		}
		pp.stdinW, pp.child[0] = ours, theirs
		pp.own = append(pp.own, theirs)
	} else {
		fd, err := devNull()
		if err != nil {
			return nil, err
		}
		pp.child[0] = fd
	}
	for i, out := range []**os.File{&pp.stdoutR, &pp.stderrR} {
		theirs, ours, err := pipe2([]string{"stdout", "stderr"}[i], true)
		if err != nil {
			pp.closeChildEnds()
			pp.closeParentEnds()
			return nil, err
		}
		*out, pp.child[i+1] = ours, theirs
		pp.own = append(pp.own, theirs)
	}
	return pp, nil
}

// pipe2 makes a pipe whose agent end (the read end for output, the write
// end for stdin) is a non-blocking file in the poller, and returns the
// child's end as a bare blocking descriptor first.
func pipe2(name string, output bool) (int, *os.File, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return -1, nil, err
	}
	ours, theirs := fds[1], fds[0]
	if output {
		ours, theirs = fds[0], fds[1]
	}
	if err := unix.SetNonblock(ours, true); err != nil {
		unix.Close(ours)
		unix.Close(theirs)
		return -1, nil, err
	}
	return theirs, os.NewFile(uintptr(ours), name), nil
}

func (pp *pipes) childFiles() []uintptr {
	return []uintptr{uintptr(pp.child[0]), uintptr(pp.child[1]), uintptr(pp.child[2])}
}

func (pp *pipes) closeChildEnds() {
	for _, fd := range pp.own {
		unix.Close(fd)
	}
	pp.own = nil
}

func (pp *pipes) closeParentEnds() {
	for _, f := range []*os.File{pp.stdinW, pp.stdoutR, pp.stderrR} {
		if f != nil {
			f.Close()
		}
	}
}

// errEnded is returned by operations on a process that has exited.
func errEnded(id uint64) error {
	return wire.Errorf(wire.CodeConflict, "process of stream %d has exited", id)
}
