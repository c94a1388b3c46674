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
// process took one of ours between our pick and the kernel's bind.
func (k *Kernel) launch(ctx context.Context) (*instance, error) {
	var inst *instance
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		inst, err = k.m.startInstance(ctx, launchSpec{
			spec: k.spec, opts: k.opts, log: k.log, onIOPub: k.onIOPub, onExit: k.onExit,
		})
		if err != errPortClash {
			break
		}
		k.log.Info("kernel port was taken; retrying with new ports")
	}
	if err == errPortClash {
		err = wire.Errorf(wire.CodeUnavailable, "kernel %s: its ports kept being taken by other processes", k.id)
	}
	return inst, err
}

// setInstance makes inst current, unless the kernel was shut down
// meanwhile; then it returns false and the caller stops inst.
func (k *Kernel) setInstance(inst *instance) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.shut {
		return false
	}
	k.inst, k.exec, k.died, k.lost = inst, StateIdle, "", false
	k.poke()
	return true
}

// onExit runs when a kernel process ended. An exit nobody asked for makes
// the kernel dead: its cells end and the next Execute is refused.
func (k *Kernel) onExit(inst *instance) {
	k.mu.Lock()
	if k.inst != inst || inst.stopping {
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
		running.emit(errorEvent{Type: "error", Name: "KernelDied", Value: msg, Traceback: []string{}})
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
	k.inst, k.exec, k.died, k.lost = nil, StateStarting, "", false
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
		old.stop(ctx)
	}
	inst, err := k.launch(ctx)
	if err != nil {
		k.mu.Lock()
		k.died = "restart failed: " + err.Error()
		k.mu.Unlock()
		return err
	}
	if !k.setInstance(inst) {
		inst.stop(ctx)
		return wire.Errorf(wire.CodeNotFound, "kernel %s was shut down", k.id)
	}
	return nil
}

// shutdown stops the process, ends every stream of the kernel with reason
// closed and stops the runner.
func (k *Kernel) shutdown(ctx context.Context) {
	k.opMu.Lock()
	defer k.opMu.Unlock()
	k.mu.Lock()
	if k.shut {
		k.mu.Unlock()
		return
	}
	k.shut = true
	inst := k.inst
	if inst != nil {
		inst.stopping = true
	}
	running, queued := k.takeCellsLocked()
	relays := k.relays
	k.relays = map[*Relay]struct{}{}
	k.mu.Unlock()
	k.poke()
	closed := stream.End{Reason: stream.ReasonClosed, Message: fmt.Sprintf("kernel %s was shut down", k.id)}
	if running != nil {
		running.finish(closed)
	}
	for _, c := range queued {
		c.finish(closed)
	}
	if inst != nil {
		inst.stop(ctx)
	}
	for r := range relays {
		r.end(closed)
	}
	<-k.done
}
