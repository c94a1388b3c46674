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

// slowBound is how long a kernel that is alive but did not answer a
// survival check in time gets to answer before it is called lost: under
// software emulation a restored kernel took tens of seconds while the
// guest translated its code again.
const slowBound = 2 * time.Minute

// CheckResult lists kernel ids by what the survival check found.
type CheckResult struct {
	Alive []string // answered (kernels still starting count as alive)
	// Slow: the process is alive but did not answer within the bound. It
	// is never called lost for that alone: the agent waits on for it (up
	// to slowBound, then it is lost and Options.OnLost runs).
	Slow []string
	Lost []string // its channels failed (closed, refused): now in state lost
	Dead []string // its process is gone
}

type verdict uint8

const (
	verdictSkip verdict = iota // shut down meanwhile
	verdictAlive
	verdictSlow
	verdictLost
	verdictDead
)

// Check probes every kernel at once (process alive, heartbeat echo,
// kernel_info_request on control) and returns when ctx ends, or within
// checkBound if ctx has no deadline. It tells a dead kernel (its process
// gone), a lost one (a channel failed) and a slow one (alive, and no
// answer yet) apart: a slow kernel is followed in the background until it
// answers, or for slowBound. Kernels that pass are no longer lost or slow.
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
		case verdictSlow:
			res.Slow = append(res.Slow, k.id)
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
	v := verdictAlive
	switch {
	case err == nil:
	case !inst.alive() || unix.Kill(inst.pid, 0) != nil:
		v = verdictDead
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		v = verdictSlow
	default:
		v = verdictLost
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.died != "" {
		return verdictDead
	}
	if k.inst == inst {
		k.lost = v == verdictLost || v == verdictDead
		k.slow = v == verdictSlow
		if v == verdictSlow && !k.following {
			k.following = true
			go k.followSlow(inst)
		}
	}
	switch v {
	case verdictSlow:
		k.log.Warn("kernel slow to answer the survival check: alive, waiting on for it", zap.Error(err), zap.Duration("up_to", k.m.slowBound))
	case verdictLost, verdictDead:
		k.log.Warn("kernel failed the survival check", zap.Error(err))
	}
	return v
}

// followSlow waits, up to slowBound, for a kernel that was too slow for a
// survival check to answer: then it is alive; if it never does, or its
// channels fail, it is lost and the manager's OnLost runs.
func (k *Kernel) followSlow(inst *instance) {
	ctx, cancel := context.WithTimeout(context.Background(), k.m.slowBound)
	defer cancel()
	go func() {
		select {
		case <-k.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := inst.probe(ctx)
	k.mu.Lock()
	k.following = false
	current := k.inst == inst && k.slow && k.died == "" && !k.shut
	if current {
		k.slow = false
		k.lost = err != nil
	}
	k.mu.Unlock()
	switch {
	case !current:
	case err == nil:
		k.log.Info("a kernel slow to answer the survival check answered; it keeps its state")
	default:
		k.log.Warn("a kernel slow to answer the survival check never did: lost", zap.Error(err))
		if k.m.onLost != nil {
			k.m.onLost(k.id)
		}
	}
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
