package ptymux

import (
	"errors"
	"maps"
	"os"
	"os/signal"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

const (
	// DrainTimeout bounds reading what is left in the terminal after the
	// program exited, for a background job that keeps it open.
	DrainTimeout = 2 * time.Second
	// HangupGrace is how long Close lets programs react to the hangup
	// (a shell saves its history) before killing them.
	HangupGrace = 3 * time.Second
	// KillGrace is how long Close waits for an exit after SIGKILL; only a
	// process stuck in the kernel outlasts it.
	KillGrace = 2 * time.Second

	// defaultTerm is what clients (xterm.js and every modern emulator)
	// implement; a TERM inherited from the agent's own service would not be.
	defaultTerm = "xterm-256color"
)

// Options describe a new PTY.
type Options struct {
	Argv       []string          // empty: the user's login shell
	Cols, Rows uint16            // 0: 80x24
	Env        map[string]string // TERM defaults to xterm-256color
	Cwd, User  string            // empty: proc.Defaults
	Tag        string
	Buffer     int // bytes of output retained; 0: 4 MiB
	// Timeout is the program's lifetime, 0 for none: then the terminal is
	// hung up, and whatever ignores that is killed after the hangup grace.
	Timeout time.Duration
}

// Manager starts PTYs and owns them until their streams finish. Start and
// Close may be called from any goroutine.
type Manager struct {
	reg      *stream.Registry
	reaper   *proc.Reaper
	defaults *proc.Defaults
	log      *zap.Logger

	passwd                        string
	drain, hangupGrace, killGrace time.Duration

	mu     sync.Mutex
	closed bool
	live   map[*PTY]struct{}
	wg     sync.WaitGroup // one per live PTY, done when its stream finished
}

// NewManager returns a manager that registers its streams in reg and
// starts programs through reaper. A nil defaults or log is allowed.
func NewManager(reg *stream.Registry, reaper *proc.Reaper, defaults *proc.Defaults, log *zap.Logger) *Manager {
	if defaults == nil {
		defaults = &proc.Defaults{}
	}
	if log == nil {
		log = zap.NewNop()
	}
	for _, sig := range []os.Signal{unix.SIGHUP, unix.SIGINT} {
		if signal.Ignored(sig) {
			// Ignored signals stay ignored across exec: Ctrl-C or a hangup
			// would do nothing in the terminals. main should catch them.
			log.Warn("the agent ignores a signal its terminals will inherit", zap.Stringer("signal", sig))
		}
	}
	return &Manager{
		reg: reg, reaper: reaper, defaults: defaults, log: log,
		passwd: passwdFile, drain: DrainTimeout, hangupGrace: HangupGrace, killGrace: KillGrace,
		live: make(map[*PTY]struct{}),
	}
}

// Start runs a program in a new pseudo-terminal, in its own session with
// the terminal as its controlling terminal, and returns its stream: kind
// pty, one byte channel "pty" under the drop policy, Control a *PTY.
// Problems the client can fix are *wire.Error.
func (m *Manager) Start(o Options) (*stream.Stream, error) {
	cols, rows := o.Cols, o.Rows
	if cols == 0 {
		cols = DefaultCols
	}
	if rows == 0 {
		rows = DefaultRows
	}
	if err := CheckSize(int(cols), int(rows)); err != nil {
		return nil, err
	}
	if o.Buffer < 0 || o.Buffer > stream.MaxByteCapacity {
		return nil, wire.Errorf(wire.CodeBadRequest, "buffer must be 1 to %d bytes, got %d", stream.MaxByteCapacity, o.Buffer)
	}
	if o.Timeout < 0 {
		return nil, wire.Errorf(wire.CodeBadRequest, "timeout must not be negative")
	}
	res, err := m.resolve(o)
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
	master, slave, err := openPair()
	if errors.Is(err, unix.ENOSPC) {
		return nil, wire.Errorf(wire.CodeLimit, "no pseudo-terminal left: %v", err)
	} else if err != nil {
		return nil, wire.Errorf(wire.CodeInternal, "%v", err)
	}
	// Our copy of the slave must go once the child has its own, or the
	// master would never read EIO.
	defer slave.Close()
	if err := setSize(master, cols, rows); err != nil {
		master.Close()
		return nil, wire.Errorf(wire.CodeInternal, "set pty size: %v", err)
	}
	if res.Cred != nil {
		// As login and sshd do: screen, mesg and write check who owns it.
		if err := slave.Chown(int(res.Cred.Uid), -1); err != nil {
			m.log.Warn("cannot give the pty to its user", zap.String("user", res.User), zap.Error(err))
		}
	}
	s, err := m.spawn(res, master, slave, cols, rows, o, reserved)
	if err != nil {
		master.Close()
		return nil, err
	}
	m.log.Debug("pty started", zap.Uint64("stream", s.ID), zap.Int("pid", s.Pid),
		zap.Strings("argv", res.Argv), zap.String("user", res.User))
	return s, nil
}

// spawn forks the program onto the slave and registers the stream. It
// holds m.mu so that Close cannot miss a PTY started concurrently.
func (m *Manager) spawn(res proc.Resolved, master, slave *os.File, cols, rows uint16, o Options, reserved *stream.Reservation) (*stream.Stream, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, wire.Errorf(wire.CodeUnavailable, "the agent is shutting down")
	}
	fd := slave.Fd()
	attr := res.Attr([]uintptr{fd, fd, fd})
	attr.Sys.Setctty = true
	attr.Sys.Ctty = 0 // the child's stdin, which is the slave
	pid, exit, err := m.reaper.ForkExec(res.Path, res.Argv, attr)
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOMEM) {
		return nil, wire.Errorf(wire.CodeLimit, "cannot start %s: %v", res.Path, err)
	} else if err != nil {
		// The child's chdir, setuid and exec all fail the same way, so
		// the message names everything the client chose.
		return nil, wire.Errorf(wire.CodeBadRequest, "cannot start %s as user %q in %q: %v", res.Path, res.User, res.Dir, err)
	}
	p := newPTY(pid, m.reaper, master, cols, rows, m.log)
	p.input.ChargeTo(m.reg.Budget())
	capacity := o.Buffer
	if capacity == 0 {
		capacity = stream.DefaultByteCapacity
	}
	s := m.reg.Create(stream.Config{
		Kind:     stream.KindPTY,
		Channels: []stream.ChannelSpec{{Name: Channel, Unit: stream.Bytes, Policy: stream.Drop, Capacity: capacity}},
		Pid:      pid, Tag: o.Tag, Argv: res.Argv, Control: p, Reservation: reserved,
	})
	p.id.Store(s.ID)
	m.live[p] = struct{}{}
	m.wg.Add(1)
	go func() {
		defer m.forget(p)
		p.run(s, exit, m.drain, lifetime{limit: o.Timeout, killAfter: m.hangupGrace})
	}()
	return s, nil
}

func (m *Manager) forget(p *PTY) {
	m.mu.Lock()
	delete(m.live, p)
	m.mu.Unlock()
	m.wg.Done()
}

// resolve applies the defaults to o. Without argv the program is the
// user's login shell, started as one.
func (m *Manager) resolve(o Options) (proc.Resolved, error) {
	env := map[string]string{"TERM": defaultTerm}
	maps.Copy(env, o.Env)
	spec := proc.Spec{Argv: o.Argv, Env: env, Cwd: o.Cwd, User: o.User}
	if len(o.Argv) > 0 {
		return m.defaults.Resolve(spec)
	}
	// The user may come from the defaults, and the shell depends on the
	// user: resolve once to learn who it is, then with their shell.
	spec.Argv = []string{fallbackShells[len(fallbackShells)-1]}
	who, err := m.defaults.Resolve(spec)
	if err != nil {
		return who, err
	}
	shell := loginShell(m.passwd, who.User)
	if _, ok := o.Env["SHELL"]; !ok {
		env["SHELL"] = shell
	}
	spec.Argv = []string{shell}
	res, err := m.defaults.Resolve(spec)
	if err != nil {
		return res, err
	}
	res.Argv = []string{loginArgv0(shell)}
	return res, nil
}

// Close hangs up every terminal, kills the programs that ignore it, and
// waits until every stream has finished. Start fails afterwards.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	ptys := make([]*PTY, 0, len(m.live))
	for p := range m.live {
		ptys = append(ptys, p)
	}
	m.mu.Unlock()

	for _, p := range ptys {
		p.hangup()
	}
	ptys = waitDone(ptys, m.hangupGrace)
	for _, p := range ptys {
		p.kill()
	}
	ptys = waitDone(ptys, m.killGrace)
	for _, p := range ptys {
		m.log.Warn("pty program did not exit after SIGKILL; abandoning it",
			zap.Uint64("stream", p.id.Load()), zap.Int("pid", p.pid))
		p.abandon()
	}
	m.wg.Wait()
}

// waitDone waits up to d for every PTY to finish and returns the others.
func waitDone(ptys []*PTY, d time.Duration) []*PTY {
	t := time.NewTimer(d)
	defer t.Stop()
	expired := false
	var left []*PTY
	for _, p := range ptys {
		if !expired {
			select {
			case <-p.done:
				continue
			case <-t.C:
				expired = true
			}
		}
		select {
		case <-p.done:
		default:
			left = append(left, p)
		}
	}
	return left
}
