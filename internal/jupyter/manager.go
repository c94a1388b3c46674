package jupyter

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// closeTimeout bounds Manager.Close: every kernel gets a polite shutdown
// and then SIGKILL within it.
const closeTimeout = 15 * time.Second

// Options configure a Manager.
type Options struct {
	Registry *stream.Registry // required: cell and relay streams go here
	Reaper   *proc.Reaper     // required: kernels are its children
	Defaults *proc.Defaults   // nil: the agent's own user, home and environment
	Logger   *zap.Logger      // nil: no logging
	DataDirs []string         // Jupyter data dirs to search; nil: StandardDataDirs()
	// OnChange, if set, runs after a kernel was started or forgotten, so
	// the set of kernels can be persisted. It must not call back into
	// the Manager's mutating methods.
	OnChange func()
	// Reseed starts, in every Python kernel, the thread that reseeds its
	// PRNGs on a resume (reseed.go; --reseed-on-resume).
	Reseed bool
	// MaxKernels bounds the kernels running or starting at once; a start
	// beyond it is refused with limit. 0: no bound (the agent's flag
	// --max-kernels defaults to DefaultMaxKernels).
	MaxKernels int
	// StartTimeout bounds a kernel start (0: DefaultStartTimeout).
	StartTimeout time.Duration
	// OnLost, if set, runs when a kernel a survival check found slow
	// did not answer within two minutes after all: it is lost now. It must
	// not call back into the Manager.
	OnLost func(kernel string)
}

// DefaultMaxKernels is the agent's kernel bound unless --max-kernels
// says otherwise. An idle ipykernel takes about 70 MB (51 of them took
// 3.5 GB), so 8 leave room for the user's own work in a 1 GiB sandbox.
const DefaultMaxKernels = 8

// StartOptions describe a kernel to start.
type StartOptions struct {
	Name string // kernelspec name; "" is DefaultKernel
	Cwd  string
	Env  map[string]string
	User string
}

// Manager owns the agent's kernels. All methods are safe for concurrent
// use. Close shuts every kernel down; the Manager is unusable after it.
type Manager struct {
	reg      *stream.Registry
	reaper   *proc.Reaper
	defaults *proc.Defaults
	log      *zap.Logger
	dirs     []string
	onChange func()
	onLost   func(kernel string)
	max      int // MaxKernels
	// startTimeout bounds a start: StartTimeout or DefaultStartTimeout.
	startTimeout time.Duration
	// newConnInfo picks a kernel's ports and key; tests make it hand out
	// a port that is taken.
	newConnInfo func(kernelName string) (connInfo, error)
	// slowBound is slowBound (check.go); tests shorten it.
	slowBound time.Duration
	// politeStop is how long a stopping kernel has to exit on its
	// shutdown_request; tests on a loaded machine give it longer.
	politeStop time.Duration
	// lose makes kernel clients lose messages, for tests of a start
	// that must survive it; nil otherwise.
	lose *losses
	// reseedOn and reseed: kernels' PRNG reseeds (reseed.go).
	reseedOn bool
	reseed   reseeder

	defMu sync.Mutex // serializes finding or starting the default kernel

	mu      sync.Mutex
	kernels map[string]*Kernel
	nextID  int
	def     *Kernel
	closed  bool
}

// NewManager returns a Manager with no kernels.
func NewManager(o Options) *Manager {
	m := &Manager{reg: o.Registry, reaper: o.Reaper, defaults: o.Defaults, log: o.Logger, dirs: o.DataDirs, onChange: o.OnChange, onLost: o.OnLost, kernels: map[string]*Kernel{}, reseedOn: o.Reseed,
		max: o.MaxKernels, newConnInfo: newConnInfo, politeStop: stopPolite, slowBound: slowBound}
	if m.defaults == nil {
		m.defaults = &proc.Defaults{}
	}
	if m.log == nil {
		m.log = zap.NewNop()
	}
	m.startTimeout = o.StartTimeout
	if m.startTimeout <= 0 {
		m.startTimeout = DefaultStartTimeout
	}
	m.log = m.log.Named("jupyter")
	if m.dirs == nil {
		m.dirs = StandardDataDirs()
	}
	removeStaleConnDirs(m.log)
	return m
}

// Start launches a kernel and returns once it answered kernel_info. A
// kernel started without a kernelspec name while there is no default
// kernel becomes the default: a user who starts "a kernel" and then runs
// cells without naming one expects them on that kernel, not on a second.
func (m *Manager) Start(ctx context.Context, o StartOptions) (*Kernel, error) {
	unnamed := o.Name == ""
	if unnamed {
		o.Name = DefaultKernel
	}
	o.Env = maps.Clone(o.Env)
	spec, err := findSpec(m.dirs, o.Name)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, errClosing()
	}
	if err := m.roomLocked(); err != nil {
		m.mu.Unlock()
		return nil, err
	}
	m.nextID++
	k := newKernel(m, "k"+strconv.Itoa(m.nextID), spec, o)
	m.kernels[k.id] = k
	m.mu.Unlock()

	inst, err := k.start(ctx)
	if err != nil {
		m.forget(k)
		k.close(context.Background(), doneEnd(StatusAborted, nil, fmt.Sprintf("kernel %s failed to start: %v", k.id, err)))
		return nil, err
	}
	k.log.Info("kernel started", zap.String("spec", spec.Name), zap.Int("pid", inst.pid))
	if unnamed {
		m.mu.Lock()
		if m.def == nil && m.kernels[k.id] == k {
			m.def = k
		}
		m.mu.Unlock()
	}
	m.changed()
	return k, nil
}

// Get returns the kernel with the id ("k1") or UUID, or a not_found
// *wire.Error.
func (m *Manager) Get(id string) (*Kernel, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := m.kernels[id]; ok {
		return k, nil
	}
	// A few kernels at most: a scan costs less than a second index to
	// keep in step.
	for _, k := range m.kernels {
		if k.uuid == id {
			return k, nil
		}
	}
	return nil, wire.Errorf(wire.CodeNotFound, "no kernel %q", id)
}

// List describes every kernel, in the order they were started.
func (m *Manager) List() []KernelInfo {
	ks := m.all()
	out := make([]KernelInfo, len(ks))
	for i, k := range ks {
		out[i] = k.Info()
	}
	return out
}

func (m *Manager) all() []*Kernel {
	m.mu.Lock()
	ks := make([]*Kernel, 0, len(m.kernels))
	for _, k := range m.kernels {
		ks = append(ks, k)
	}
	m.mu.Unlock()
	sort.Slice(ks, func(i, j int) bool { return idNumber(ks[i].id) < idNumber(ks[j].id) })
	return ks
}

// SkipIDs makes later kernels get ids after the given ones, so a kernel
// reported lost from an earlier run never shares its id with a new one.
func (m *Manager) SkipIDs(ids []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		m.nextID = max(m.nextID, idNumber(id))
	}
}

func idNumber(id string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "k"))
	return n
}

// ExecuteOptions are the optional parts of an execution.
type ExecuteOptions struct {
	Timeout    time.Duration // 0: none
	AllowStdin bool
	// Env is set in the kernel's environment (os.environ) for this cell
	// only and restored after it; python kernels only.
	Env map[string]string
}

// Execute queues code on a kernel and returns the cell's stream (kind
// cell, one "events" channel) and the kernel's id. kernelID "" is the
// default kernel, started on first use; if it died or was lost (and does
// not answer when probed again), a new one is started and the cell's first
// event, on stderr, says so. timeout 0 means none.
func (m *Manager) Execute(ctx context.Context, kernelID, code string, timeout time.Duration, allowStdin bool) (*stream.Stream, string, error) {
	return m.ExecuteWith(ctx, kernelID, code, ExecuteOptions{Timeout: timeout, AllowStdin: allowStdin})
}

// ExecuteWith is Execute with all of its options.
func (m *Manager) ExecuteWith(ctx context.Context, kernelID, code string, o ExecuteOptions) (*stream.Stream, string, error) {
	if strings.TrimSpace(code) == "" {
		return nil, "", wire.Errorf(wire.CodeBadRequest, "execute: code is empty")
	}
	if o.Timeout < 0 {
		return nil, "", wire.Errorf(wire.CodeBadRequest, "execute: timeout must not be negative")
	}
	if err := proc.CheckEnv(o.Env); err != nil {
		return nil, "", err
	}
	if kernelID == "" {
		return m.executeDefault(ctx, code, o)
	}
	k, err := m.Get(kernelID)
	if err != nil {
		return nil, "", err
	}
	k.recheck(ctx)
	s, err := k.enqueue(code, o, "")
	return s, k.id, err
}

func (m *Manager) executeDefault(ctx context.Context, code string, o ExecuteOptions) (*stream.Stream, string, error) {
	m.defMu.Lock()
	defer m.defMu.Unlock()
	m.mu.Lock()
	old := m.def
	m.mu.Unlock()
	var why string
	if old != nil {
		old.recheck(ctx)
		s, err := old.enqueue(code, o, "")
		if err == nil {
			return s, old.id, nil
		}
		if why = old.lostReason(); why == "" {
			return nil, "", err
		}
	}
	k, err := m.Start(ctx, StartOptions{})
	if err != nil {
		return nil, "", err
	}
	m.mu.Lock()
	m.def = k
	m.mu.Unlock()
	note := ""
	if old != nil {
		note = fmt.Sprintf("kernel restarted: previous default kernel %s %s; this cell runs on a new kernel, %s, without the old one's variables\n", old.id, why, k.id)
		k.log.Warn("replaced the default kernel", zap.String("previous", old.id), zap.String("why", why))
	}
	s, err := k.enqueue(code, o, note)
	return s, k.id, err
}

// lostReason says why the kernel's state is gone ("died (...)", "was
// lost ..."), or "" if it is usable or was shut down on purpose.
func (k *Kernel) lostReason() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.shut:
		return ""
	case k.died != "":
		return "died (" + k.died + ")"
	case k.lost:
		return "was lost (it failed the survival check)"
	}
	return ""
}

// InputReply answers the input_request a cell stream is waiting on.
func (m *Manager) InputReply(streamID uint64, value string) error {
	c, err := m.cellOf(streamID)
	if err != nil {
		return err
	}
	return c.reply(value)
}

// cellOf is the cell of stream streamID.
func (m *Manager) cellOf(streamID uint64) (*cell, error) {
	s := m.reg.Get(streamID)
	if s == nil {
		return nil, wire.Errorf(wire.CodeNotFound, "no stream %d", streamID)
	}
	c, ok := s.Control.(*cell)
	if !ok {
		return nil, wire.Errorf(wire.CodeBadRequest, "stream %d is a %s stream, not a cell", streamID, s.Kind)
	}
	return c, nil
}

// CancelCell stops cell stream streamID for why (its client went away):
// a queued cell ends aborted without running; a running one has its
// kernel interrupted, as a timeout does. A cell that already ended is
// left as it is.
func (m *Manager) CancelCell(streamID uint64, why string) error {
	c, err := m.cellOf(streamID)
	if err != nil {
		return err
	}
	c.cancel(why)
	return nil
}

// Interrupt interrupts the kernel's running cell: interrupt_request on
// control if the kernelspec asks for messages, else SIGINT to the
// kernel's process group.
func (m *Manager) Interrupt(id string) error {
	k, err := m.Get(id)
	if err != nil {
		return err
	}
	inst, err := k.current()
	if err != nil {
		return err
	}
	if err := inst.interrupt(); err != nil {
		return wire.Errorf(wire.CodeInternal, "interrupt kernel %s: %v", id, err)
	}
	return nil
}

// Restart replaces the kernel's process with a fresh one under the same
// id, and returns once the new one is ready. Works on dead and lost
// kernels. The restart runs to its end within its own bound, whoever
// waits for it: one half done when its caller goes away would leave the
// kernel without a process. ctx bounds only the wait; a caller that stops
// waiting gets unavailable and the kernel its new process all the same.
func (m *Manager) Restart(ctx context.Context, id string) error {
	k, err := m.Get(id)
	if err != nil {
		return err
	}
	if k.Info().State == StateDead {
		// A dead kernel takes no room (roomLocked): running it again needs some.
		m.mu.Lock()
		err := m.roomLocked()
		m.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return runToEnd(ctx, m.restartBound(), func(ctx context.Context) error { return k.restart(ctx) },
		"kernel %s is still restarting", id)
}

// Shutdown stops the kernel and ends its cell and relay streams with
// reason closed. The id is forgotten at once. Like Restart, the shutdown
// runs to its end within its own bound (closeTimeout), whoever waits.
func (m *Manager) Shutdown(ctx context.Context, id string) error {
	k, err := m.Get(id)
	if err != nil {
		return err
	}
	m.forget(k)
	return runToEnd(ctx, closeTimeout, func(ctx context.Context) error { k.shutdown(ctx); return nil },
		"kernel %s is still shutting down", id)
}

// restartBound bounds a restart: stopping the old process, then starting
// a new one.
func (m *Manager) restartBound() time.Duration {
	return stopPolite + stopTerm + stopKill + m.startTimeout
}

// runToEnd runs op with a context of its own, bounded by bound and not
// cancelled with ctx, and waits for it, or for ctx: then it returns
// unavailable (format and id say what is still going on) while op goes on.
func runToEnd(ctx context.Context, bound time.Duration, op func(context.Context) error, format, id string) error {
	done := make(chan error, 1)
	go func() {
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
		defer cancel()
		done <- op(octx)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return wire.Errorf(wire.CodeUnavailable, format+" (it goes on)", id)
	}
}

// roomLocked says whether another kernel may run: MaxKernels bounds the
// kernels running or starting, not the dead ones, which hold no process
// and stay only to be restarted or shut down (two cells that ran
// os._exit must not refuse every later start).
func (m *Manager) roomLocked() error {
	if m.max <= 0 {
		return nil
	}
	live := 0
	for _, k := range m.kernels {
		k.mu.Lock()
		if k.died == "" && !k.shut {
			live++
		}
		k.mu.Unlock()
	}
	if live < m.max {
		return nil
	}
	return wire.Errorf(wire.CodeLimit, "kernel limit reached: %d running, the most this agent allows (--max-kernels %d); shut one down to start another (kernel_shutdown, DELETE /api/kernels/ID, DELETE /contexts/ID)", live, m.max)
}

func (m *Manager) forget(k *Kernel) {
	m.mu.Lock()
	if m.kernels[k.id] == k {
		delete(m.kernels, k.id)
	}
	if m.def == k {
		m.def = nil
	}
	m.mu.Unlock()
	m.changed()
}

func (m *Manager) changed() {
	if m.onChange != nil {
		m.onChange()
	}
}

// Channels opens a raw relay to the kernel (see Relay): a stream of kind
// kernel_channels whose Control is the *Relay.
func (m *Manager) Channels(id string) (*stream.Stream, error) {
	k, err := m.Get(id)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.shut {
		return nil, wire.Errorf(wire.CodeNotFound, "kernel %s was shut down", id)
	}
	r := newRelay(k)
	k.relays[r] = struct{}{}
	return r.s, nil
}

// Close shuts every kernel down, in parallel, within closeTimeout.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	ks := make([]*Kernel, 0, len(m.kernels))
	for _, k := range m.kernels {
		ks = append(ks, k)
	}
	m.kernels, m.def = map[string]*Kernel{}, nil
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, k := range ks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.shutdown(ctx)
		}()
	}
	wg.Wait()
	m.reseed.close()
	return nil
}

func errClosing() error {
	return wire.Errorf(wire.CodeUnavailable, "the kernel manager is shutting down")
}
