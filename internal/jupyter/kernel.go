package jupyter

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/wire"
)

// State is a kernel's state as `kernel_list` reports it.
type State string

const (
	StateStarting State = "starting"
	StateIdle     State = "idle"
	StateBusy     State = "busy"
	StateDead     State = "dead"
	StateLost     State = "lost"
	// StateSlow: alive, but it did not answer a resume's survival check
	// in time; the agent waits on for it (check.go).
	StateSlow State = "slow"
)

// KernelInfo describes a kernel for `kernel_list`.
type KernelInfo struct {
	Kernel         string `json:"kernel"`
	UUID           string `json:"uuid"`
	Name           string `json:"name"`
	Pid            int    `json:"pid"`
	State          State  `json:"state"`
	ExecutionCount int    `json:"execution_count"`
}

// Kernel is one kernel id: a kernelspec, the options it was started with,
// its current process (replaced by Restart), its queue of cells and its
// relays. Cells run one at a time, in the order they were queued, on one
// runner goroutine that Shutdown stops.
type Kernel struct {
	id     string
	uuid   string // the id Jupyter's surfaces show (see UUID)
	spec   *kernelspec
	opts   StartOptions
	m      *Manager
	log    *zap.Logger
	wake   chan struct{} // pokes the runner; buffered, never blocks
	done   chan struct{} // closed when the runner returns
	closed chan struct{} // closed when shutdown is done
	opMu   sync.Mutex    // serializes the start, restarts and shutdown

	// cancelLaunch stops the start or restart in progress; set under mu.
	cancelLaunch context.CancelFunc

	mu   sync.Mutex
	inst *instance // nil while (re)starting
	// ready is closed once the kernel has a process, or can have none
	// (dead, shut down); a restart replaces it with an open one. What
	// must go to the process waits on it (currentWait).
	ready chan struct{}
	exec  State  // starting, idle or busy, from iopub status
	died  string // why the kernel is dead; "" while it is not
	lost  bool   // failed the last survival check
	// slow: the last survival check timed out while the process lived;
	// following says a goroutine waits for it to answer (check.go).
	slow      bool
	following bool
	shut      bool
	count     int
	queue     []*cell
	running   *cell
	relays    map[*Relay]struct{}
	// activity is when the kernel last published anything, for
	// jupyter_server's last_activity.
	activity time.Time
}

func newKernel(m *Manager, id string, spec *kernelspec, opts StartOptions) *Kernel {
	k := &Kernel{
		id: id, uuid: newID(), spec: spec, opts: opts, m: m, log: m.log.With(zap.String("kernel", id)),
		wake: make(chan struct{}, 1), done: make(chan struct{}), closed: make(chan struct{}),
		exec: StateStarting, relays: map[*Relay]struct{}{}, activity: time.Now(),
		ready: make(chan struct{}),
	}
	go k.run()
	return k
}

// ID is the kernel's id, "k1", "k2", ...
func (k *Kernel) ID() string { return k.id }

// UUID is the kernel's other id, a random UUID, which the jupyter_server
// API hands out: Jupyter's own servers and clients route kernel ids by
// that shape (Notebook's gateway mode answers 404 for /api/kernels/k1/
// channels). The Manager finds a kernel by either.
func (k *Kernel) UUID() string { return k.uuid }

// Info returns the kernel's listing entry.
func (k *Kernel) Info() KernelInfo {
	k.mu.Lock()
	defer k.mu.Unlock()
	info := KernelInfo{Kernel: k.id, UUID: k.uuid, Name: k.spec.Name, State: k.stateLocked(), ExecutionCount: k.count}
	if k.inst != nil {
		info.Pid = k.inst.pid
	}
	return info
}

// Language is the kernelspec's language ("python").
func (k *Kernel) Language() string { return k.spec.Language }

// Cwd is the directory the kernel's process started in, or the one asked
// for while it starts.
func (k *Kernel) Cwd() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.inst != nil {
		return k.inst.cwd
	}
	return k.opts.Cwd
}

// LastActivity is when the kernel last reported its state (every request
// makes it report busy and idle), or when it was started.
func (k *Kernel) LastActivity() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.activity
}

// Connections counts the open relays to the kernel.
func (k *Kernel) Connections() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.relays)
}

func (k *Kernel) stateLocked() State {
	switch {
	case k.died != "":
		return StateDead
	case k.lost:
		return StateLost
	case k.slow:
		return StateSlow
	case k.inst == nil:
		return StateStarting
	}
	return k.exec
}

// usableLocked returns why a new cell cannot be queued, or nil.
func (k *Kernel) usableLocked() error {
	switch {
	case k.shut:
		return wire.Errorf(wire.CodeNotFound, "kernel %s was shut down", k.id)
	case k.died != "":
		return wire.Errorf(wire.CodeConflict, "kernel %s is dead (%s); restart it or start a new one", k.id, k.died)
	case k.lost:
		return wire.Errorf(wire.CodeConflict, "kernel %s was lost (it failed the survival check); restart it or shut it down", k.id)
	}
	return nil
}

func (k *Kernel) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// onIOPub follows the kernel's state and passes iopub to every relay.
func (k *Kernel) onIOPub(m *message) {
	switch m.MsgType {
	case "status", "execute_input":
		body, err := m.content()
		if err != nil {
			break
		}
		k.mu.Lock()
		k.activity = time.Now()
		// A kernel that speaks is alive: one slow to answer a resume's
		// check is no longer slow, whether its follow-up probe has had
		// its answer yet or not (a cell's reply can come first).
		k.slow = false
		switch body.ExecutionState {
		case "idle":
			k.exec = StateIdle
		case "busy":
			k.exec = StateBusy
		}
		if body.ExecutionCount != nil {
			k.count = max(k.count, *body.ExecutionCount)
		}
		k.mu.Unlock()
	}
	for _, r := range k.relayList() {
		r.publish(chIOPub, m)
	}
}

func (k *Kernel) relayList() []*Relay {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]*Relay, 0, len(k.relays))
	for r := range k.relays {
		out = append(out, r)
	}
	return out
}

// publishStatus tells relays about a state change that the kernel itself
// cannot announce (it is dead, or being replaced), as jupyter_server does.
func (k *Kernel) publishStatus(state string) {
	m, err := newMessage("", "status", nil, map[string]string{"execution_state": state})
	if err != nil {
		return
	}
	for _, r := range k.relayList() {
		r.publish(chIOPub, m)
	}
}
