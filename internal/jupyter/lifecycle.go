package jupyter

import (
	"context"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// launch starts a process for the kernel, trying fresh ports when another
// process took one of ours between our pick and the kernel's bind. The
// caller holds opMu. Shutdown cancels a launch in progress, so it never
// waits for a start and no process outlives it.
func (k *Kernel) launch(ctx context.Context) (*instance, error) {
	k.mu.Lock()
	if k.shut {
		k.mu.Unlock()
		return nil, k.errShutDuringStart()
	}
	ctx, cancel := context.WithCancel(ctx)
	k.cancelLaunch = cancel
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.cancelLaunch = nil
		k.mu.Unlock()
		cancel()
	}()
	var inst *instance
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		inst, err = k.m.startInstance(ctx, launchSpec{
			spec: k.spec, opts: k.opts, log: k.log, onIOPub: k.onIOPub, onExit: k.onExit,
		})
		if err != errPortClash || ctx.Err() != nil {
			break
		}
		k.log.Info("kernel port was taken; retrying with new ports")
	}
	if err == errPortClash {
		err = wire.Errorf(wire.CodeUnavailable, "kernel %s: its ports kept being taken by other processes", k.id)
	}
	if err != nil && k.isShut() {
		err = k.errShutDuringStart()
	}
	if err == nil {
		// Before any cell: the handler is part of the process's start.
		k.installReseed(inst)
	}
	return inst, err
}

func (k *Kernel) errShutDuringStart() error {
	return wire.Errorf(wire.CodeNotFound, "kernel %s was shut down while it started", k.id)
}

func (k *Kernel) isShut() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.shut
}

// start launches the kernel's first process. It holds opMu so that a
// Restart that comes meanwhile waits for it instead of starting a second
// process beside it.
func (k *Kernel) start(ctx context.Context) (*instance, error) {
	k.opMu.Lock()
	defer k.opMu.Unlock()
	inst, err := k.launch(ctx)
	if err != nil {
		return nil, err
	}
	if !k.setInstance(inst) {
		inst.stop(ctx, false)
		return nil, k.errShutDuringStart()
	}
	return inst, nil
}

// setInstance makes inst current, unless the kernel was shut down
// meanwhile; then it returns false and the caller stops inst. A process
// that died between its start and here (its onExit saw another instance
// current and did nothing) makes the kernel dead at once.
func (k *Kernel) setInstance(inst *instance) bool {
	k.mu.Lock()
	if k.shut {
		k.mu.Unlock()
		return false
	}
	k.inst, k.exec, k.died, k.lost = inst, StateIdle, "", false
	k.readyLocked()
	k.poke()
	k.mu.Unlock()
	if !inst.alive() {
		k.onExit(inst)
	}
	return true
}

// onExit runs when a kernel process ended. An exit nobody asked for makes
// the kernel dead: its cells end and the next Execute is refused.
func (k *Kernel) onExit(inst *instance) {
	k.mu.Lock()
	if k.inst != inst || inst.stopping || k.died != "" {
		k.mu.Unlock()
		return
	}
	why := "its process ended"
	if inst.statusWasSeen {
		why = describeExit(inst.status)
	}
	k.died = why
	running, queued := k.takeCellsLocked()
	k.mu.Unlock()
	k.log.Warn("kernel died", zap.String("how", why), zap.String("output", lastLines(strings.TrimSpace(inst.tail.String()), 5)))
	msg := fmt.Sprintf("kernel %s died (%s)", k.id, why)
	if running != nil {
		running.emit(errorEvent{Type: CellError, Name: "KernelDied", Value: msg, Traceback: []string{}})
		running.finish(doneEnd(StatusError, nil, msg))
	}
	for _, c := range queued {
		c.finish(doneEnd(StatusAborted, nil, msg+" before the cell ran"))
	}
	k.publishStatus("dead")
}

func (k *Kernel) takeCellsLocked() (*cell, []*cell) {
	running, queued := k.running, k.queue
	k.running, k.queue = nil, nil
	return running, queued
}

// readyLocked says the kernel is no longer starting: it has a process,
// or it died or was shut down.
func (k *Kernel) readyLocked() {
	select {
	case <-k.ready:
	default:
		close(k.ready)
	}
}

// currentWait is current, waiting while the kernel (re)starts, within
// ctx: a message sent during a restart goes to the new process, as
// jupyter_server's queues deliver it (a client reconnecting during a
// restart sends kernel_info_request at once and waits for its reply).
func (k *Kernel) currentWait(ctx context.Context) (*instance, error) {
	for {
		k.mu.Lock()
		ready := k.ready
		starting := k.inst == nil && !k.shut && k.died == ""
		k.mu.Unlock()
		if !starting {
			return k.current()
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return k.current()
		}
	}
}

// current returns the running process, or an error saying why there is none.
func (k *Kernel) current() (*instance, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.shut:
		return nil, wire.Errorf(wire.CodeNotFound, "kernel %s was shut down", k.id)
	case k.died != "":
		return nil, wire.Errorf(wire.CodeConflict, "kernel %s is dead (%s)", k.id, k.died)
	case k.inst == nil:
		return nil, wire.Errorf(wire.CodeUnavailable, "kernel %s is starting", k.id)
	}
	return k.inst, nil
}

// restart replaces the process. The running cell ends with an error and
// queued ones are aborted: they were written for the state that is gone.
func (k *Kernel) restart(ctx context.Context) error {
	k.opMu.Lock()
	defer k.opMu.Unlock()
	k.mu.Lock()
	if k.shut {
		k.mu.Unlock()
		return wire.Errorf(wire.CodeNotFound, "kernel %s was shut down", k.id)
	}
	old := k.inst
	if old != nil {
		old.stopping = true
	}
	busy := k.exec == StateBusy
	k.inst, k.exec, k.died, k.lost = nil, StateStarting, "", false
	k.readyLocked()
	k.ready = make(chan struct{})
	running, queued := k.takeCellsLocked()
	k.mu.Unlock()
	msg := fmt.Sprintf("kernel %s was restarted", k.id)
	if running != nil {
		running.finish(doneEnd(StatusError, nil, msg+" while the cell ran"))
	}
	for _, c := range queued {
		c.finish(doneEnd(StatusAborted, nil, msg+" before the cell ran"))
	}
	k.publishStatus("restarting")
	if old != nil {
		old.stop(ctx, busy || running != nil)
	}
	inst, err := k.launch(ctx)
	if err != nil {
		k.restartFailed(err)
		return err
	}
	if !k.setInstance(inst) {
		inst.stop(ctx, false)
		return wire.Errorf(wire.CodeNotFound, "kernel %s was shut down", k.id)
	}
	return nil
}

// restartFailed makes the kernel dead and ends the cells queued while it
// restarted: no process will ever run them.
func (k *Kernel) restartFailed(err error) {
	k.mu.Lock()
	if k.shut {
		k.mu.Unlock()
		return // shutdown ended the cells
	}
	k.died = "restart failed: " + err.Error()
	k.readyLocked()
	running, queued := k.takeCellsLocked()
	k.mu.Unlock()
	k.log.Warn("kernel restart failed", zap.Error(err))
	msg := fmt.Sprintf("kernel %s could not be restarted: %v", k.id, err)
	if running != nil {
		running.finish(doneEnd(StatusAborted, nil, msg))
	}
	for _, c := range queued {
		c.finish(doneEnd(StatusAborted, nil, msg))
	}
	k.publishStatus("dead")
}

// shutdown stops the process, ends every stream of the kernel with reason
// closed and stops the runner.
func (k *Kernel) shutdown(ctx context.Context) {
	k.close(ctx, stream.End{Reason: stream.ReasonClosed, Message: fmt.Sprintf("kernel %s was shut down", k.id)})
}

// close is shutdown with the end its cells get: a kernel whose start
// failed aborts the cells queued on it rather than calling them closed.
// A launch in progress is cancelled first, so close returns once no
// process of the kernel is left, without waiting for a start to finish.
// Later calls wait for the first one to be done.
func (k *Kernel) close(ctx context.Context, cellEnd stream.End) {
	k.mu.Lock()
	if k.shut {
		k.mu.Unlock()
		select {
		case <-k.closed:
		case <-ctx.Done():
		}
		return
	}
	k.shut = true
	k.readyLocked()
	if k.cancelLaunch != nil {
		k.cancelLaunch()
	}
	running, queued := k.takeCellsLocked()
	busy := running != nil || k.exec == StateBusy
	relays := k.relays
	k.relays = map[*Relay]struct{}{}
	k.mu.Unlock()
	defer close(k.closed)
	k.poke()
	if running != nil {
		running.finish(cellEnd)
	}
	for _, c := range queued {
		c.finish(cellEnd)
	}
	k.opMu.Lock()
	k.mu.Lock()
	inst := k.inst
	if inst != nil {
		inst.stopping = true
	}
	k.mu.Unlock()
	if inst != nil {
		inst.stop(ctx, busy)
	}
	k.opMu.Unlock()
	closed := stream.End{Reason: stream.ReasonClosed, Message: fmt.Sprintf("kernel %s was shut down", k.id)}
	for r := range relays {
		r.end(closed)
	}
	<-k.done
}
