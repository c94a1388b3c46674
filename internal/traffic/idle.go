package traffic

import (
	"time"
)

// IdleWatcher calls a hook once each time the sandbox becomes idle: when
// the idle policy's time has passed with no counted byte. Any counted byte
// ends the idle period, and the next one fires the hook again.
type IdleWatcher struct {
	stop chan struct{}
	done chan struct{}
}

// idleTick is how often idleness is checked; the policy is in whole
// minutes, so a second is plenty.
const idleTick = time.Second

// WatchIdle starts watching c. hook runs on its own goroutine.
func WatchIdle(c *Counter, hook func(Snapshot)) *IdleWatcher {
	return watchIdle(c, idleTick, hook)
}

func watchIdle(c *Counter, every time.Duration, hook func(Snapshot)) *IdleWatcher {
	w := &IdleWatcher{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		fired := false
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
			s := c.Snapshot()
			switch {
			case s.Idle && !fired:
				fired = true
				go hook(s)
			case !s.Idle:
				fired = false
			}
		}
	}()
	return w
}

// Close stops watching.
func (w *IdleWatcher) Close() {
	close(w.stop)
	<-w.done
}
