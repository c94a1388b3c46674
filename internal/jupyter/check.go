package jupyter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// checkBound is how long Check waits for a kernel that does not answer
// when the caller's context sets no deadline, and how long a kernel marked
// lost gets to answer again before a cell is refused or the default kernel
// replaced. A live kernel answers in milliseconds; its heartbeat and
// control channel run on their own threads, so even a busy cell does not
// delay them. Right after a restore under software emulation it takes
// seconds.
const checkBound = 5 * time.Second

// CheckResult lists kernel ids by what the survival check found.
type CheckResult struct {
	Alive []string // answered (kernels still starting count as alive)
	Lost  []string // did not answer within the bound; now in state lost
	Dead  []string // had already died before the check
}

type verdict uint8

const (
	verdictSkip verdict = iota // shut down meanwhile
	verdictAlive
	verdictLost
	verdictDead
)

// Check probes every kernel at once (process alive, heartbeat echo,
// kernel_info_request on control) and returns when ctx ends, or within
// checkBound if ctx has no deadline. Kernels that fail are marked lost,
// and kernels that pass are no longer lost.
func (m *Manager) Check(ctx context.Context) CheckResult {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, checkBound)
		defer cancel()
	}
	ks := m.all()
	verdicts := make([]verdict, len(ks))
	var wg sync.WaitGroup
	for i, k := range ks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			verdicts[i] = k.check(ctx)
		}()
	}
	wg.Wait()
	var res CheckResult
	for i, k := range ks {
		switch verdicts[i] {
		case verdictAlive:
			res.Alive = append(res.Alive, k.id)
		case verdictLost:
			res.Lost = append(res.Lost, k.id)
		case verdictDead:
			res.Dead = append(res.Dead, k.id)
		}
	}
	return res
}

func (k *Kernel) check(ctx context.Context) verdict {
	k.mu.Lock()
	inst, shut, dead := k.inst, k.shut, k.died != ""
	k.mu.Unlock()
	switch {
	case shut:
		return verdictSkip
	case dead:
		return verdictDead
	case inst == nil:
		return verdictAlive
	}
	err := inst.probe(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.died != "" {
		return verdictDead
	}
	if k.inst == inst {
		k.lost = err != nil
	}
	if err != nil {
		k.log.Warn("kernel failed the survival check", zap.Error(err))
		return verdictLost
	}
	return verdictAlive
}

// recheck gives a kernel marked lost one more chance, for up to
// checkBound, before a cell is refused or the default kernel is replaced:
// a kernel that was only slow to answer a resume's short check keeps its
// state and its cells.
func (k *Kernel) recheck(ctx context.Context) {
	k.mu.Lock()
	lost := k.lost && k.died == "" && !k.shut
	k.mu.Unlock()
	if !lost {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, checkBound)
	defer cancel()
	if k.check(ctx) == verdictAlive {
		k.log.Info("a kernel reported lost answered again; it keeps its state")
	}
}

// probe asks the process, the heartbeat and the control channel, all at
// once, and fails if any of them does not answer before ctx ends.
func (inst *instance) probe(ctx context.Context) error {
	if !inst.alive() {
		return errors.New("process has exited")
	}
	if err := unix.Kill(inst.pid, 0); err != nil {
		return fmt.Errorf("process: %w", err)
	}
	var hbErr, ctlErr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		hbErr = inst.conn.ping(ctx)
	}()
	go func() {
		defer wg.Done()
		_, ctlErr = inst.conn.request(ctx, chControl, "kernel_info_request", struct{}{})
	}()
	wg.Wait()
	if hbErr != nil {
		return fmt.Errorf("heartbeat: %w", hbErr)
	}
	if ctlErr != nil {
		return fmt.Errorf("kernel_info on control: %w", ctlErr)
	}
	return nil
}
