package jupyter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/wire"
)

const (
	// DefaultStartTimeout bounds a kernel start when the caller's context
	// does not (--kernel-start-timeout); IPython imports take seconds on
	// a loaded two-core VM, and up to two minutes under software
	// emulation (TCG) on a busy host.
	DefaultStartTimeout = 2 * time.Minute
	// nudgeEvery paces the kernel_info requests sent while waiting for the
	// first iopub message, which proves our subscription is live.
	nudgeEvery = 100 * time.Millisecond
	// resendEvery paces what a start repeats in case it was lost: the
	// first kernel_info_request, and the iopub subscription.
	resendEvery = 2 * time.Second
	// stop steps: shutdown_request, then SIGTERM, then SIGKILL to the group.
	stopPolite = 2 * time.Second
	stopTerm   = time.Second
	stopKill   = 5 * time.Second
	// interruptWait bounds the wait for an interrupt_reply.
	interruptWait = 2 * time.Second
	// outputTail is how much of the kernel process's own stdout and stderr
	// is kept to explain a failed start.
	outputTail = 8 << 10
)

var errPortClash = errors.New("jupyter: kernel port taken by another process")

// instance is one kernel process and the agent's connection to it. A
// Kernel has one at a time; Restart replaces it.
//
// The watch goroutine owns teardown: when the process exits (or the
// manager gives up on it) it cancels ctx, kills what is left of the
// process group, closes the client, removes the connection directory,
// closes exited and then calls onExit.
type instance struct {
	pid           int
	cwd           string       // where the process started
	reaper        *proc.Reaper // started the process; signals its group
	info          connInfo
	interruptMsg  bool
	dir           string
	log           *zap.Logger
	onExit        func(*instance)
	ctx           context.Context
	cancel        context.CancelFunc
	dialed        chan struct{} // closed once the start stopped dialing
	exited        chan struct{}
	abandon       chan struct{} // closed by Manager.Close if the reaper never reports
	abandonOnce   sync.Once
	stopping      bool          // set under Kernel.mu: the exit was asked for
	politeStop    time.Duration // the wait after shutdown_request, before SIGTERM
	tail          *tailBuffer
	outDone       chan struct{}
	outputPipe    *os.File
	conn          *client // set before dialed is closed; nil if dialing failed
	status        proc.Status
	statusWasSeen bool
	// reseedNonce is what the process's reseed thread answers to, at
	// its abstract socket reseedAddr (reseed.go); "" without one,
	// reseedWhy says why.
	reseedNonce string
	reseedAddr  string
	reseedWhy   string
}

type launchSpec struct {
	spec    *kernelspec
	opts    StartOptions
	log     *zap.Logger
	onIOPub func(*message)
	onExit  func(*instance)
}

// startInstance launches a kernel and waits until it answers
// kernel_info_request and its iopub stream is flowing. The manager's
// start bound (--kernel-start-timeout) covers all of it, the wait for the
// kernel to bind its ports included: the one owner of that bound, whatever
// surface asked for the start.
func (m *Manager) startInstance(ctx context.Context, ls launchSpec) (*instance, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, m.startTimeout, fmt.Errorf("not ready within %v (--kernel-start-timeout)", m.startTimeout))
	defer cancel()
	info, err := m.newConnInfo(ls.spec.Name)
	if err != nil {
		return nil, err
	}
	dir, err := newConnDir()
	if err != nil {
		return nil, fmt.Errorf("connection dir: %w", err)
	}
	connFile := filepath.Join(dir, "connection.json")
	env := make(map[string]string, len(ls.spec.Env)+len(ls.opts.Env))
	for k, v := range ls.spec.Env {
		env[k] = v
	}
	for k, v := range ls.opts.Env {
		env[k] = v
	}
	res, err := m.defaults.Resolve(proc.Spec{Argv: ls.spec.argv(connFile), Env: env, Cwd: ls.opts.Cwd, User: ls.opts.User})
	if err == nil {
		err = info.write(connFile, res.Cred)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	pid, exitCh, outR, err := m.fork(res)
	if err != nil {
		os.RemoveAll(dir)
		return nil, wire.Errorf(wire.CodeUnavailable, "start kernel %s: %v", ls.spec.Name, err)
	}
	inst := &instance{
		pid: pid, cwd: res.Dir, reaper: m.reaper, info: info, interruptMsg: ls.spec.InterruptMode == interruptMessage, dir: dir,
		log: ls.log.With(zap.Int("pid", pid)), onExit: ls.onExit, politeStop: m.politeStop,
		dialed: make(chan struct{}), exited: make(chan struct{}), abandon: make(chan struct{}),
		tail: &tailBuffer{max: outputTail}, outDone: make(chan struct{}), outputPipe: outR,
	}
	inst.ctx, inst.cancel = context.WithCancel(context.Background())
	go inst.copyOutput()
	go inst.watch(exitCh)
	// Dialing waits for the kernel to bind and only knows inst.ctx: a
	// start given up on (a shutdown, the caller's deadline) kills the
	// process, which ends the dial.
	giveUp := context.AfterFunc(ctx, inst.kill)

	conn, err := dialClient(inst.ctx, info, ls.onIOPub, inst.log, m.lose)
	inst.conn = conn
	close(inst.dialed)
	if err == nil {
		err = inst.waitReady(ctx, m.startTimeout)
	}
	if !giveUp() {
		// The bound (or the caller) ended the start: that is why, not
		// the dial the kill cut short.
		err = context.Cause(ctx)
	}
	if err != nil {
		exitedFirst := inst.ctx.Err() != nil && ctx.Err() == nil
		inst.killAndWait()
		return nil, inst.startError(ls.spec.Name, exitedFirst, err)
	}
	return inst, nil
}

// fork starts the kernel in its own session with stdin from /dev/null and
// stdout and stderr into a pipe the agent reads.
func (m *Manager) fork(res proc.Resolved) (int, <-chan proc.Status, *os.File, error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, nil, nil, err
	}
	defer devnull.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return 0, nil, nil, err
	}
	defer w.Close()
	pid, exitCh, err := m.reaper.ForkExec(res.Path, res.Argv, res.Attr([]uintptr{devnull.Fd(), w.Fd(), w.Fd()}))
	if err != nil {
		r.Close()
		return 0, nil, nil, err
	}
	return pid, exitCh, r, nil
}

func (inst *instance) waitReady(ctx context.Context, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-inst.ctx.Done():
			stop()
		case <-ctx.Done():
		}
	}()
	// The first request and the subscription are repeated until they are
	// answered: ZeroMQ delivers a message on a connection that is up, but
	// a start on a loaded machine once waited its two minutes out with the
	// kernel up (a loaded make test), and zmq4 sends a SUB socket's
	// subscription to a new connection once, ignoring a failure. A
	// kernel_info_request is harmless to repeat; replies to the earlier
	// ones are dropped.
	for {
		attempt, cancel := context.WithTimeout(ctx, resendEvery)
		_, err := inst.conn.request(attempt, chShell, "kernel_info_request", struct{}{})
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return errors.Join(ctx.Err(), err)
		}
	}
	// Each kernel_info_request makes the kernel publish busy and idle;
	// once one arrives the SUB subscription has reached the kernel.
	resubscribe := time.NewTicker(resendEvery)
	defer resubscribe.Stop()
	for {
		select {
		case <-inst.conn.iopubSeen:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-resubscribe.C:
			inst.conn.subscribe()
		case <-time.After(nudgeEvery):
			if m, err := newMessage(inst.conn.session, "kernel_info_request", nil, struct{}{}); err == nil {
				inst.conn.send(chShell, m)
			}
		}
	}
}

func (inst *instance) startError(name string, exitedFirst bool, err error) error {
	var we *wire.Error
	if errors.As(err, &we) {
		return err
	}
	out := strings.TrimSpace(inst.tail.String())
	// A kernel that could not bind one of its ports says so, whether it
	// exited before the dial failed or the dial first reached the foreign
	// socket that holds the port (zmq4 then fails on the socket types).
	if errors.Is(err, errPortClash) || strings.Contains(out, "Address already in use") {
		return errPortClash
	}
	if exitedFirst && inst.statusWasSeen {
		return wire.Errorf(wire.CodeUnavailable, "kernel %s exited during start (%s): %s", name, describeExit(inst.status), lastLines(out, 5))
	}
	return wire.Errorf(wire.CodeUnavailable, "kernel %s did not become ready: %v: %s", name, err, lastLines(out, 5))
}

// watch waits for the process to end and tears the instance down.
func (inst *instance) watch(exitCh <-chan proc.Status) {
	select {
	case st := <-exitCh:
		inst.status, inst.statusWasSeen = st, true
	case <-inst.abandon:
	}
	inst.cancel()
	// Children of the kernel (a shell command started from a cell) go with it.
	inst.signalGroup(unix.SIGKILL)
	<-inst.dialed
	if inst.conn != nil {
		inst.conn.close()
	}
	select {
	case <-inst.outDone:
	case <-time.After(500 * time.Millisecond):
		// Something outside the group still holds the pipe.
	}
	inst.outputPipe.Close()
	<-inst.outDone
	os.RemoveAll(inst.dir)
	if inst.statusWasSeen {
		inst.log.Info("kernel process ended", zap.String("how", describeExit(inst.status)))
	}
	close(inst.exited)
	if inst.onExit != nil {
		inst.onExit(inst)
	}
}

func (inst *instance) copyOutput() {
	defer close(inst.outDone)
	io.Copy(inst.tail, inst.outputPipe)
}

// kill ends the process group now.
func (inst *instance) kill() { inst.signalGroup(unix.SIGKILL) }

// killAndWait kills the group and waits for the teardown, giving up on a
// reaper that never reports.
func (inst *instance) killAndWait() {
	inst.kill()
	t := time.NewTimer(stopKill)
	defer t.Stop()
	select {
	case <-inst.exited:
	case <-t.C:
		inst.giveUp()
	}
}

// giveUp makes watch tear down without an exit status, and waits for it.
func (inst *instance) giveUp() {
	inst.abandonOnce.Do(func() { close(inst.abandon) })
	<-inst.exited
}

// stop ends the kernel politely if it can: shutdown_request on control,
// then SIGTERM, then SIGKILL to its process group. It returns once the
// instance is torn down or ctx is done. A kernel busy with a cell is
// interrupted first: ipykernel acts on shutdown_request only once the
// running cell is over, so a cell in a loop would cost the whole polite
// wait and then a SIGTERM.
func (inst *instance) stop(ctx context.Context, busy bool) {
	steps := []struct {
		do   func()
		wait time.Duration
	}{
		{func() {
			if busy {
				inst.interruptNow()
			}
			if m, err := newMessage(inst.conn.session, "shutdown_request", nil, map[string]bool{"restart": false}); err == nil {
				inst.conn.send(chControl, m)
			}
		}, inst.politeStop},
		{func() { inst.signalGroup(unix.SIGTERM) }, stopTerm},
		{inst.kill, stopKill},
	}
	for _, s := range steps {
		s.do()
		t := time.NewTimer(s.wait)
		select {
		case <-inst.exited:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			inst.killAndWait()
			return
		case <-t.C:
		}
	}
	// The reaper never reported the exit: give up on it so nothing leaks.
	inst.giveUp()
}

// interrupt interrupts the running code the way the kernelspec asks: an
// interrupt_request on control (answered even while a cell runs), or
// SIGINT to the process group.
func (inst *instance) interrupt() error {
	if inst.interruptMsg {
		ctx, cancel := context.WithTimeout(inst.ctx, interruptWait)
		defer cancel()
		_, err := inst.conn.request(ctx, chControl, "interrupt_request", struct{}{})
		return err
	}
	return inst.signalGroup(unix.SIGINT)
}

// interruptNow interrupts the running code without waiting for an answer.
func (inst *instance) interruptNow() {
	if !inst.interruptMsg {
		inst.signalGroup(unix.SIGINT)
		return
	}
	if m, err := newMessage(inst.conn.session, "interrupt_request", nil, struct{}{}); err == nil {
		inst.conn.send(chControl, m)
	}
}

func (inst *instance) alive() bool {
	select {
	case <-inst.exited:
		return false
	default:
		return true
	}
}

// signalGroup signals the kernel's process group; the kernel leads its own
// session, so its pid is the group id. Through the reaper, which refuses a
// number another process took after the group emptied. A group already
// gone is fine.
func (inst *instance) signalGroup(sig syscall.Signal) error {
	if err := inst.reaper.Kill(inst.pid, sig, true); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}

func describeExit(st proc.Status) string {
	if st.OOMKilled {
		return "killed by the kernel's OOM killer (out of memory)"
	}
	if st.Wait.Signaled() {
		return "killed by " + proc.SignalName(st.Wait.Signal())
	}
	return fmt.Sprintf("exit code %d", st.Wait.ExitStatus())
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
