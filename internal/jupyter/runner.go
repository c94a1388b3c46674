package jupyter

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// timeoutGrace is how long a timed-out cell may take to stop after its
// interrupt before it is ended anyway.
const timeoutGrace = 5 * time.Second

// enqueue creates a cell stream and queues it; note, if set, is the
// cell's first event.
func (k *Kernel) enqueue(code string, o ExecuteOptions, note string) (*stream.Stream, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.usableLocked(); err != nil {
		return nil, err
	}
	if len(o.Env) > 0 && !k.spec.isPython() {
		return nil, wire.Errorf(wire.CodeBadRequest, "environment variables for one cell need a python kernel; kernel %s is %s", k.id, k.spec.Language)
	}
	c := newCellStream(k.m.reg, code, o.Timeout, o.AllowStdin)
	c.env = o.Env
	if note != "" {
		c.note(note)
	}
	k.queue = append(k.queue, c)
	k.poke()
	return c.s, nil
}

func (k *Kernel) run() {
	defer close(k.done)
	for {
		c, inst := k.next()
		if c == nil {
			return
		}
		k.runCell(inst, c)
		k.mu.Lock()
		if k.running == c {
			k.running = nil
		}
		k.mu.Unlock()
	}
}

// next waits for a queued cell and a ready process, or for shutdown.
func (k *Kernel) next() (*cell, *instance) {
	for {
		k.mu.Lock()
		if k.shut {
			k.mu.Unlock()
			return nil, nil
		}
		if len(k.queue) > 0 && k.inst != nil && k.died == "" {
			c := k.queue[0]
			k.queue[0] = nil
			k.queue = k.queue[1:]
			k.running = c
			inst := k.inst
			k.mu.Unlock()
			return c, inst
		}
		k.mu.Unlock()
		<-k.wake
	}
}

// runCell sends the cell and waits for it to finish, enforcing its
// timeout and its cancel: an interrupt first, then after timeoutGrace the
// cell is ended whatever the kernel does.
func (k *Kernel) runCell(inst *instance, c *cell) {
	if len(c.env) > 0 {
		if err := k.setCellEnv(inst, c.env); err != nil {
			c.finish(doneEnd(StatusError, nil, fmt.Sprintf("could not set the cell's environment: %v", err)))
			return
		}
		defer k.restoreCellEnv(inst)
	}
	c.start(inst)
	var timeout <-chan time.Time
	if c.timeout > 0 {
		t := time.NewTimer(c.timeout)
		defer t.Stop()
		timeout = t.C
	}
	var why string
	select {
	case <-c.finished:
		return
	case <-timeout:
		if !c.markTimedOut() {
			return
		}
		why = timeoutMessage(c.timeout)
	case <-c.cancelled:
		c.mu.Lock()
		why = "cancelled: " + c.cancelWhy
		c.mu.Unlock()
	}
	c.note(fmt.Sprintf("cell %s; interrupting the kernel\n", why))
	if err := inst.interrupt(); err != nil {
		k.log.Warn("interrupt failed", zap.Error(err))
	}
	t := time.NewTimer(timeoutGrace)
	defer t.Stop()
	select {
	case <-c.finished:
	case <-t.C:
		c.finish(doneEnd(StatusAborted, nil, why+"; the kernel did not stop it"))
	}
}
